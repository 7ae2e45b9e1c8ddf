package meshworker

import (
	"errors"
	"os"
	"path/filepath"
)

// The workspace quota's defaults (package wsquota keeps it): Config's
// MaxWorkspaceBytes and MaxWorkspaceFiles, and the worker definition's
// isolation.resources.workspace and workspace_files.
const (
	DefaultMaxWorkspaceBytes = 2 << 30
	DefaultMaxWorkspaceFiles = 200_000
)

// missingParents counts the parent directories of p that a write would
// create.
func (w *worker) missingParents(p string) int64 {
	n := int64(0)
	for dir := filepath.Dir(p); dir != "." && dir != "/"; dir = filepath.Dir(dir) {
		if _, err := w.root.Lstat(dir); err == nil {
			break
		}
		n++
	}
	return n
}

// sizeOf returns the size of p in the workspace, or -1 when it does not
// exist.
func (w *worker) sizeOf(p string) int64 {
	fi, err := w.root.Lstat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return -1
		}
		return 0
	}
	return fi.Size()
}
