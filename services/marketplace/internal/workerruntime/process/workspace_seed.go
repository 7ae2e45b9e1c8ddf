package process

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// SeedWorkspace implements workerruntime.Runtime: it unpacks the tar into the
// workspace directory through an os.Root, so no entry, link or name can
// land outside it. Owners are not changed: the worker runs as the
// marketplace's own user.
func (r *Runtime) SeedWorkspace(ctx context.Context, h workerruntime.Handle, tr io.Reader) error {
	journey, err := r.journeyOf(h)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(r.workspace(journey))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("seeding workspace of %s: %w", journey, workerruntime.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("seeding workspace of %s: %w", journey, err)
	}
	defer root.Close()
	rd := tar.NewReader(tr)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("seeding workspace of %s: %w", journey, err)
		}
		name := path.Clean(strings.TrimSuffix(hdr.Name, "/"))
		if err := seedEntry(root, name, hdr, rd); err != nil {
			return fmt.Errorf("seeding workspace of %s: %s: %w", journey, name, err)
		}
	}
}

func seedEntry(root *os.Root, name string, hdr *tar.Header, content io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		err := root.Mkdir(name, 0o755)
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	case tar.TypeSymlink:
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(hdr.Mode)&0o755)
		if err != nil {
			return err
		}
		if _, err := io.CopyN(f, content, hdr.Size); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	return fmt.Errorf("tar entry type %q is not taken", hdr.Typeflag)
}
