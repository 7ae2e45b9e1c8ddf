package bases

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Draft is a base being built in memory. Every file added is checked; the
// first refusal is returned and the draft should be dropped. A draft is
// finished by Commit (files written as a tree) or SetCommit (a fetched
// commit), which check the links between its files.
type Draft struct {
	mem   *memory.Storage
	store *draftStorage
	// scratch is where a fetched packfile waits while it is checked.
	scratch string
	limits  Limits
	files   map[string]Entry
	// dirs counts the files below each directory, to refuse a path that
	// is both a file and a directory whichever comes first.
	dirs   map[string]int
	bytes  int64
	commit plumbing.Hash
	origin plumbing.Hash
}

// NewDraft returns an empty draft whose fetched packfiles wait in the
// system's temporary directory; Store.NewDraft's wait in the store's.
func NewDraft(limits Limits) *Draft { return newDraft(limits, os.TempDir()) }

func newDraft(limits Limits, scratch string) *Draft {
	d := &Draft{mem: memory.NewStorage(), scratch: scratch, limits: limits.withDefaults(), files: map[string]Entry{}, dirs: map[string]int{}}
	d.store = &draftStorage{Storage: d.mem, d: d}
	return d
}

// Storage is the draft's object store, for fetching a git source into. A
// packfile fetched into it is checked against the draft's limits before
// any of its objects is stored (see checkPack).
func (d *Draft) Storage() storage.Storer { return d.store }

// Limits are the draft's limits, defaults filled in.
func (d *Draft) Limits() Limits { return d.limits }

// Files are the files added so far.
func (d *Draft) Files() map[string]Entry { return d.files }

// Bytes is the content size of the files added so far.
func (d *Draft) Bytes() int64 { return d.bytes }

// AddFile checks a file and stores its content as a blob. mode is
// filemode.Regular, Executable or Symlink (content is then the target).
func (d *Draft) AddFile(p string, mode filemode.FileMode, content io.Reader) error {
	clean, err := CheckPath(p)
	if err != nil {
		return err
	}
	if err := d.admit(clean); err != nil {
		return err
	}
	// Read one byte past what is left, so a file that passes the limit is
	// refused without reading it all.
	left := d.limits.MaxBytes - d.bytes
	data, err := io.ReadAll(io.LimitReader(content, left+1))
	if err != nil {
		return fmt.Errorf("reading %q: %w", clean, err)
	}
	if int64(len(data)) > left {
		return refused("the files pass the limit of %d bytes at %q", d.limits.MaxBytes, clean)
	}
	switch mode {
	case filemode.Regular, filemode.Executable:
	case filemode.Symlink:
		if err := CheckLink(clean, string(data)); err != nil {
			return err
		}
	default:
		return refused("%q is a %s; only files and symbolic links are taken", clean, mode)
	}
	h, err := WriteBlob(d.mem, data)
	if err != nil {
		return err
	}
	d.put(clean, Entry{Mode: mode, Hash: h, Size: int64(len(data))})
	return nil
}

// AddTree checks every file of a tree already in the draft's storage (a
// fetched commit's) and records it, as AddFile does. Submodules (gitlinks)
// are skipped: their content is another repository's.
func (d *Draft) AddTree(t *object.Tree) error {
	files, err := Flatten(t, d.limits.MaxEntries())
	if err != nil {
		return err
	}
	for p, e := range files {
		clean, err := CheckPath(p)
		if err != nil {
			return err
		}
		if clean != p {
			return refused("%q is not in canonical form", p)
		}
		if err := d.admit(clean); err != nil {
			return err
		}
		if e.Size, err = d.mem.EncodedObjectSize(e.Hash); err != nil {
			return fmt.Errorf("%q: %w", clean, err)
		}
		if e.Size > d.limits.MaxBytes-d.bytes {
			return refused("the files pass the limit of %d bytes at %q", d.limits.MaxBytes, clean)
		}
		if e.Mode == filemode.Symlink {
			target, err := readBlob(d.mem, e.Hash, MaxLinkTarget)
			if err != nil {
				return refused("symbolic link %q: %v", clean, err)
			}
			if err := CheckLink(clean, string(target)); err != nil {
				return err
			}
		}
		d.put(clean, e)
	}
	return nil
}

// admit refuses one more file at p: a second one at the same path, one past
// the file limit, or one that would be a directory of another file (or have
// files below it).
func (d *Draft) admit(p string) error {
	if _, dup := d.files[p]; dup {
		return refused("%q appears twice", p)
	}
	if len(d.files)+1 > d.limits.MaxFiles {
		return refused("more than %d files (at %q)", d.limits.MaxFiles, p)
	}
	if d.dirs[p] > 0 {
		return refused("%q is both a file and a directory", p)
	}
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if _, ok := d.files[dir]; ok {
			return refused("%q is both a file and a directory (of %q)", dir, p)
		}
	}
	return nil
}

// put records an admitted file.
func (d *Draft) put(p string, e Entry) {
	d.files[p] = e
	d.bytes += e.Size
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		d.dirs[dir]++
	}
}

// Remove drops a file from the draft (its blob stays, unreferenced).
func (d *Draft) Remove(p string) {
	e, ok := d.files[p]
	if !ok {
		return
	}
	d.bytes -= e.Size
	delete(d.files, p)
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if d.dirs[dir]--; d.dirs[dir] == 0 {
			delete(d.dirs, dir)
		}
	}
}

// Content reads a draft file's content.
func (d *Draft) Content(p string) ([]byte, Entry, error) {
	e, ok := d.files[p]
	if !ok {
		return nil, e, fmt.Errorf("%w: %q is not in the base", ErrRefused, p)
	}
	data, err := readBlob(d.mem, e.Hash, e.Size)
	return data, e, err
}

// AddLink adds a hard link: p gets the content and mode of target, a file
// added before it. A link to anything else is refused.
func (d *Draft) AddLink(p, target string) error {
	clean, err := CheckPath(target)
	if err != nil {
		return fmt.Errorf("hard link %q: %w", p, err)
	}
	e, ok := d.files[clean]
	if !ok || e.Mode == filemode.Symlink {
		return refused("hard link %q points to %q, which is not a file earlier in the source", p, target)
	}
	data, err := readBlob(d.mem, e.Hash, e.Size)
	if err != nil {
		return err
	}
	return d.AddFile(p, e.Mode, bytes.NewReader(data))
}

// SetCommit makes c, a fetched commit whose tree was added with AddTree,
// the draft's base commit; origin is the git source's commit it descends
// from (zero for none).
func (d *Draft) SetCommit(c, origin plumbing.Hash) error {
	if err := d.checkLinks(); err != nil {
		return err
	}
	d.commit, d.origin = c, origin
	return nil
}

// Commit writes the draft's files as a tree and a commit on parent (zero for
// none) and makes it the base commit.
func (d *Draft) Commit(message string, parent, origin plumbing.Hash) (plumbing.Hash, error) {
	if err := d.checkLinks(); err != nil {
		return plumbing.ZeroHash, err
	}
	tree, err := WriteTree(d.mem, d.files)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	c, err := WriteCommit(d.mem, tree, parent, message, time.Unix(0, 0))
	if err != nil {
		return plumbing.ZeroHash, err
	}
	d.commit, d.origin = c, origin
	return c, nil
}

// checkLinks refuses a symbolic link whose target goes through another
// link (LinkThroughLink).
func (d *Draft) checkLinks() error {
	links := map[string]string{}
	for p, e := range d.files {
		if e.Mode != filemode.Symlink {
			continue
		}
		target, err := readBlob(d.mem, e.Hash, MaxLinkTarget)
		if err != nil {
			return refused("symbolic link %q: %v", p, err)
		}
		links[p] = string(target)
	}
	if p, through, ok := LinkThroughLink(links); ok {
		return refused("symbolic link %q points through the symbolic link %q; links to links are not taken", p, through)
	}
	return nil
}

// WriteTar writes the draft's files as a tar stream to seed a workspace
// with, owned by owner, modified now (a fresh checkout, to build tools):
// from memory, where the content already is.
func (d *Draft) WriteTar(w io.Writer, owner Owner, extra ...TarExtra) error {
	return WriteTar(w, d.mem, d.files, owner, time.Now(), extra...)
}
