package bases

import (
	"archive/tar"
	"fmt"
	"io"
	"math"
	"path"
	"sort"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// Owner is who the files a workspace receives belong to: the worker's user.
type Owner struct {
	UID, GID int
}

// TarExtra writes more entries into a workspace tar, before it is closed.
type TarExtra func(tw *tar.Writer, owner Owner, mtime time.Time) error

// WriteTar writes files, read from s, as a tar stream to unpack into an empty
// workspace: directories first (0755), then files (0644, 0755 for
// executables) and symbolic links, all owned by owner, modified at mtime,
// with names relative to the workspace root; then what extra writes. Files
// must have passed a Draft's checks.
func WriteTar(w io.Writer, s ObjectReader, files map[string]Entry, owner Owner, mtime time.Time, extra ...TarExtra) error {
	paths := make([]string, 0, len(files))
	dirs := map[string]bool{}
	for p := range files {
		paths = append(paths, p)
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	dirList := make([]string, 0, len(dirs))
	for d := range dirs {
		dirList = append(dirList, d)
	}
	sort.Strings(dirList) // parents sort before their children
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, d := range dirList {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, Uid: owner.UID, Gid: owner.GID, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return fmt.Errorf("writing the workspace tar: %w", err)
		}
	}
	for _, p := range paths {
		e := files[p]
		limit := e.Size
		if limit < 0 {
			limit = math.MaxInt64
		}
		data, err := readBlob(s, e.Hash, limit)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: p, Uid: owner.UID, Gid: owner.GID, ModTime: mtime, Format: tar.FormatPAX}
		switch e.Mode {
		case filemode.Symlink:
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, string(data), 0o777
			data = nil
		case filemode.Executable:
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o755, int64(len(data))
		default:
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing the workspace tar: %w", err)
		}
		if _, err := tw.Write(data); err != nil {
			return fmt.Errorf("writing the workspace tar: %w", err)
		}
	}
	for _, x := range extra {
		if err := x(tw, owner, mtime); err != nil {
			return fmt.Errorf("writing the workspace tar: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing the workspace tar: %w", err)
	}
	return nil
}
