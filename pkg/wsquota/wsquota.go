// Package wsquota keeps a workspace within a size and file-count quota where
// the storage cannot: Docker's local volumes take no size limit. It measures
// the workspace by walking it, counts the writes it is told of, watches it
// while a command runs, and refuses work while it is over.
//
// meshworker keeps builtin workers' quota with it, mesh-exec agent workers'.
package wsquota

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

// A Quota bounds one workspace: writes are refused before they would pass
// it, a command is killed when its measured use does, and while the
// workspace is over it only reads and deletes should go on.
//
// Usage is measured by walking the workspace (sizes as stat reports them,
// each hard-linked file once, every entry counted as a file), kept between
// calls and measured again after anything but a counted write changed the
// tree (Invalidate).
type Quota struct {
	root     string
	maxBytes int64 // 0: no limit
	maxFiles int64 // 0: no limit

	mu    sync.Mutex
	known bool
	use   usage
}

type usage struct{ bytes, files int64 }

// New returns the quota of the workspace at root; a limit of 0 or less is
// no limit.
func New(root string, maxBytes, maxFiles int64) *Quota {
	return &Quota{root: root, maxBytes: max(maxBytes, 0), maxFiles: max(maxFiles, 0)}
}

// Enabled reports whether any limit is set.
func (q *Quota) Enabled() bool { return q.enabled() }

func (q *Quota) enabled() bool { return q.maxBytes > 0 || q.maxFiles > 0 }

// over describes how u passes the quota, or returns "".
func (q *Quota) over(u usage) string {
	switch {
	case q.maxBytes > 0 && u.bytes > q.maxBytes:
		return fmt.Sprintf("the workspace holds %d bytes, over its quota of %d bytes (isolation.resources.workspace)", u.bytes, q.maxBytes)
	case q.maxFiles > 0 && u.files > q.maxFiles:
		return fmt.Sprintf("the workspace holds %d files, over its quota of %d files (isolation.resources.workspace_files)", u.files, q.maxFiles)
	}
	return ""
}

// Invalidate forgets the usage: something other than a write changed the
// tree.
func (q *Quota) Invalidate() {
	q.mu.Lock()
	q.known = false
	q.mu.Unlock()
}

// current returns the usage, measuring it if it is not known. q.mu is held.
func (q *Quota) current() (usage, error) {
	if !q.known {
		u, err := q.measure()
		if err != nil {
			return usage{}, err
		}
		q.use, q.known = u, true
	}
	return q.use, nil
}

// Remeasure measures the workspace anew and returns how it passes the
// quota, or "".
func (q *Quota) Remeasure() (string, error) {
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

// Watch measures the workspace every interval until stop is closed and
// calls kill, once, with the reason when it passes the quota (or cannot be
// measured). A command
// that fills the disk is stopped within about one interval of passing.
func (q *Quota) Watch(interval time.Duration, stop <-chan struct{}, kill func(reason string)) {
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
			// Once more: a command removing files as they are walked can
			// fail one walk (a build's temporary directories).
			u, err = q.measure()
		}
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

// Check refuses an action while the workspace is over its quota.
func (q *Quota) Check(action string) error {
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

// Write runs do, a write of size bytes to a file whose present size is
// oldSize (-1: a new file) that creates newDirs parent directories, if the
// workspace stays within its quota, and counts it. Writes are serialised so two cannot both take the last room.
func (q *Quota) Write(oldSize, size, newDirs int64, do func() error) error {
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
func (q *Quota) measure() (usage, error) {
	var u usage
	seen := map[uint64]bool{}
	err := filepath.WalkDir(q.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			if path != q.root {
				// Also removed while we walked, reported otherwise: gVisor
				// answers the read of a directory removed under an open
				// descriptor with EINVAL.
				if _, lerr := os.Lstat(path); errors.Is(lerr, fs.ErrNotExist) {
					return nil
				}
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
