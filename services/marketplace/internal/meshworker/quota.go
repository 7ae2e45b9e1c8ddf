package meshworker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// The workspace quota's defaults: Config.MaxWorkspaceBytes and
// Config.MaxWorkspaceFiles, and the worker definition's
// isolation.resources.workspace and workspace_files.
const (
	DefaultMaxWorkspaceBytes = 2 << 30
	DefaultMaxWorkspaceFiles = 200_000
)

// A workspace volume lives on the host's disk, and Docker's local volumes
// take no size limit, so the quota is kept here: writes are refused before
// they would pass it, a command is killed when its measured use does, and
// while the workspace is over it only reads and deletes go on.
//
// Usage is measured by walking the workspace (sizes as stat reports them,
// each hard-linked file once, every entry counted as a file), kept between
// calls and measured again after anything but a write changed the tree.
type quota struct {
	root     string
	maxBytes int64 // 0: no limit
	maxFiles int64 // 0: no limit

	mu    sync.Mutex
	known bool
	use   usage
}

type usage struct{ bytes, files int64 }

func (q *quota) enabled() bool { return q.maxBytes > 0 || q.maxFiles > 0 }

// over describes how u passes the quota, or returns "".
func (q *quota) over(u usage) string {
	switch {
	case q.maxBytes > 0 && u.bytes > q.maxBytes:
		return fmt.Sprintf("the workspace holds %d bytes, over its quota of %d bytes (isolation.resources.workspace)", u.bytes, q.maxBytes)
	case q.maxFiles > 0 && u.files > q.maxFiles:
		return fmt.Sprintf("the workspace holds %d files, over its quota of %d files (isolation.resources.workspace_files)", u.files, q.maxFiles)
	}
	return ""
}

// invalidate forgets the usage: something other than a write changed the
// tree.
func (q *quota) invalidate() {
	q.mu.Lock()
	q.known = false
	q.mu.Unlock()
}

// current returns the usage, measuring it if it is not known. q.mu is held.
func (q *quota) current() (usage, error) {
	if !q.known {
		u, err := q.measure()
		if err != nil {
			return usage{}, err
		}
		q.use, q.known = u, true
	}
	return q.use, nil
}

// remeasure measures the workspace anew and returns how it passes the
// quota, or "".
func (q *quota) remeasure() (string, error) {
	if !q.enabled() {
		return "", nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.known = false
	u, err := q.current()
	if err != nil {
		return "", err
	}
	return q.over(u), nil
}

// watch measures the workspace every interval until stop is closed and
// calls kill, once, with the reason when it passes the quota (or cannot be
// measured). A command
// that fills the disk is stopped within about one interval of passing.
func (q *quota) watch(interval time.Duration, stop <-chan struct{}, kill func(reason string)) {
	if !q.enabled() {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		u, err := q.measure()
		if err != nil {
			// Fail closed: a workspace that cannot be measured cannot be
			// held to its quota.
			kill(err.Error())
			return
		}
		if msg := q.over(u); msg != "" {
			kill(msg)
			return
		}
	}
}

// check refuses an action while the workspace is over its quota.
func (q *quota) check(action string) error {
	if !q.enabled() {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u, err := q.current()
	if err != nil {
		return err
	}
	if msg := q.over(u); msg != "" {
		return fmt.Errorf("%s refused: %s; delete files to go on", action, msg)
	}
	return nil
}

// write runs do, a write of size bytes to a file whose present size is
// oldSize (-1: a new file) that creates newDirs parent directories, if the
// workspace stays within its quota, and counts it. Writes are serialised so two cannot both take the last room.
func (q *quota) write(oldSize, size, newDirs int64, do func() error) error {
	if !q.enabled() {
		return do()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u, err := q.current()
	if err != nil {
		return err
	}
	next := u
	next.bytes += size
	next.files += newDirs
	if oldSize >= 0 {
		next.bytes -= oldSize
	} else {
		next.files++
	}
	if msg := q.over(next); msg != "" {
		return fmt.Errorf("refused by the workspace quota: after it, %s", msg)
	}
	if err := do(); err != nil {
		q.known = false // a failed write may have left a directory
		return err
	}
	q.use = next
	return nil
}

// errOverQuota stops a walk that has already counted past the quota: its
// exact size does not matter any more, and a tree of millions of files
// should not cost millions of stats.
var errOverQuota = errors.New("over quota")

// measure walks the workspace. Symbolic links are counted, not followed.
func (q *quota) measure() (usage, error) {
	var u usage
	seen := map[uint64]bool{}
	err := filepath.WalkDir(q.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			if errors.Is(err, fs.ErrPermission) && path != q.root {
				// A directory a command made unreadable (mode 0): its
				// entry counts, its content cannot be seen. Failing the
				// walk instead would switch the quota off.
				u.files++
				return fs.SkipDir
			}
			return err
		}
		if path == q.root {
			return nil
		}
		u.files++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return nil //nolint:nilerr // removed while we walked
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			u.bytes += fi.Size()
		}
		if q.over(u) != "" {
			return errOverQuota
		}
		return nil
	})
	if err != nil && !errors.Is(err, errOverQuota) {
		return usage{}, fmt.Errorf("measuring the workspace: %w", err)
	}
	return u, nil
}

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
