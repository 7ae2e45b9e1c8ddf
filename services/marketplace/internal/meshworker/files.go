package meshworker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

type readIn struct {
	Path string `json:"path" jsonschema:"file path relative to the workspace root"`
}

type readOut struct {
	Path    string `json:"path" jsonschema:"the path read, slash-separated"`
	Content string `json:"content" jsonschema:"the file's content as text"`
	Size    int64  `json:"size" jsonschema:"the file's size in bytes"`
}

func (w *worker) read(_ context.Context, in readIn) (readOut, error) {
	p, err := relPath(in.Path, false)
	if err != nil {
		return readOut{}, err
	}
	if _, err := w.guard("read", p, true); err != nil {
		return readOut{}, err
	}
	data, err := w.readFile(p)
	if err != nil {
		return readOut{}, fmt.Errorf("read %s: %w", p, err)
	}
	return readOut{Path: display(p), Content: string(data), Size: int64(len(data))}, nil
}

// errNotRegular refuses what is not a plain file: reading a FIFO or a device
// could block or never end.
var errNotRegular = errors.New("not a regular file")

// tooLarge is the error for a file or content over the size limit.
func tooLarge(limit int64) error {
	return fmt.Errorf("file is larger than the limit of %d bytes", limit)
}

// readFile reads a regular file through the root, reading at most one byte
// more than the limit, so a file that grows while it is read is still
// refused and never held whole in memory.
func (w *worker) readFile(p string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading must not wait for a writer
	// before the mode check below can refuse it.
	f, err := w.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, errors.New("is a directory (use list)")
	case !fi.Mode().IsRegular():
		return nil, errNotRegular
	case fi.Size() > w.cfg.MaxFileSize:
		return nil, tooLarge(w.cfg.MaxFileSize)
	}
	if err := w.checkOpened(p, f, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, w.cfg.MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > w.cfg.MaxFileSize {
		return nil, tooLarge(w.cfg.MaxFileSize)
	}
	return data, nil
}

type writeIn struct {
	Path    string `json:"path" jsonschema:"file path relative to the workspace root; parent directories are created"`
	Content string `json:"content" jsonschema:"the file's new content"`
}

type writeOut struct {
	Path  string `json:"path" jsonschema:"the path written, slash-separated"`
	Bytes int64  `json:"bytes" jsonschema:"bytes written"`
}

func (w *worker) write(_ context.Context, in writeIn) (writeOut, error) {
	if w.cfg.Readonly {
		return writeOut{}, errReadonly
	}
	p, err := relPath(in.Path, false)
	if err != nil {
		return writeOut{}, err
	}
	if n := int64(len(in.Content)); n > w.cfg.MaxFileSize {
		return writeOut{}, fmt.Errorf("write %s: content is %d bytes, larger than the limit of %d bytes", p, n, w.cfg.MaxFileSize)
	}
	// The parent directories are resolved as they are now; those the write
	// creates cannot be links.
	if _, err := w.guard("write", p, true); err != nil {
		return writeOut{}, err
	}
	err = w.quota.Write(w.sizeOf(p), int64(len(in.Content)), w.missingParents(p), func() error { return w.writeFile(p, []byte(in.Content)) })
	if err != nil {
		return writeOut{}, fmt.Errorf("write %s: %w", p, err)
	}
	return writeOut{Path: display(p), Bytes: int64(len(in.Content))}, nil
}

// writeFile replaces p atomically: the content goes to a temporary file in
// the same directory, which is renamed over p only once it is complete and
// synced, so a failed write never leaves a half-written file.
func (w *worker) writeFile(p string, data []byte) error {
	dir, base := filepath.Split(p)
	if base == "" || base == "." || base == ".." {
		return errors.New("path names a directory, not a file")
	}
	if dir != "" {
		err := w.root.MkdirAll(dir, 0o755)
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("a parent of the path is not a directory: %w", err)
		}
		if err != nil {
			return fmt.Errorf("creating parent directories: %w", err)
		}
	}
	mode := fs.FileMode(0o644)
	switch fi, err := w.root.Lstat(p); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		// Renaming over the link would silently turn it into a file, and
		// writing through it is what a link out of the workspace would need.
		return errors.New("path is a symbolic link; write to its target instead")
	case fi.IsDir():
		return errors.New("path is a directory")
	default:
		mode = fi.Mode().Perm()
	}

	// dir is kept as given (with its trailing slash): the root resolves it
	// exactly as it resolves p.
	tmp := dir + "." + base + "." + rand.Text()[:12] + ".meshworker-tmp"
	f, err := w.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("creating a temporary file: %w", err)
	}
	err = writeAndSync(f, data, mode)
	if err == nil {
		err = w.root.Rename(tmp, p)
	}
	if err != nil {
		_ = w.root.Remove(tmp) // best effort; the error that matters is err
		return err
	}
	return nil
}

func writeAndSync(f *os.File, data []byte, mode fs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(mode) // keep an existing file's mode, whatever the umask
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

type deleteIn struct {
	Path      string `json:"path" jsonschema:"path relative to the workspace root; a symbolic link is removed, never its target"`
	Recursive bool   `json:"recursive,omitempty" jsonschema:"delete a directory with everything in it (default false)"`
}

type deleteOut struct {
	Path    string `json:"path" jsonschema:"the path deleted, slash-separated"`
	Deleted bool   `json:"deleted" jsonschema:"true when the path was removed"`
}

func (w *worker) delete(_ context.Context, in deleteIn) (deleteOut, error) {
	defer w.quota.Invalidate()
	if w.cfg.Readonly {
		return deleteOut{}, errReadonly
	}
	p, err := relPath(in.Path, false)
	if err != nil {
		return deleteOut{}, err
	}
	// Cleaned so that "dir/" removes the link "dir" rather than what it
	// points to; the root still checks the cleaned path.
	p = filepath.Clean(p)
	if p == "." {
		return deleteOut{}, errors.New("refusing to delete the workspace root")
	}
	// The last component is not followed: deleting a link removes the
	// link, never its target.
	if _, err := w.guard("delete", p, false); err != nil {
		return deleteOut{}, err
	}
	fi, err := w.root.Lstat(p)
	if err != nil {
		return deleteOut{}, fmt.Errorf("delete %s: %w", p, err)
	}
	if fi.IsDir() && in.Recursive {
		err = w.root.RemoveAll(p)
	} else {
		err = w.root.Remove(p)
	}
	if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return deleteOut{}, fmt.Errorf("delete %s: directory is not empty; set recursive to delete it", p)
	}
	if err != nil {
		return deleteOut{}, fmt.Errorf("delete %s: %w", p, err)
	}
	return deleteOut{Path: display(p), Deleted: true}, nil
}
