package bases

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/meshwork/meshwork/pkg/gate"
)

// Entry is one file of a tree: a regular file, an executable or a symbolic
// link (its target is the blob's content).
type Entry struct {
	Mode filemode.FileMode
	Hash plumbing.Hash
	// Size is the content's length; -1 when not known (Flatten does not
	// read sizes: finding each in a stored repository costs a lookup).
	Size int64
}

// Limits bound what a base may hold. Zero fields take the defaults.
type Limits struct {
	// MaxFiles is the most files (links included). Defaults to 100,000.
	MaxFiles int
	// MaxBytes is the most bytes of file content in all. Defaults to 1 GiB.
	MaxBytes int64
}

// Default limits.
const (
	DefaultMaxFiles = 100_000
	DefaultMaxBytes = 1 << 30
)

func (l Limits) withDefaults() Limits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	return l
}

// ErrRefused marks a base refused for its content: a bad path, a link out of
// the workspace, a file of a kind workspaces cannot hold, or a limit passed.
// Its message says which entry and why.
var ErrRefused = errors.New("refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// CheckPath refuses a path a workspace must not receive: anything the gate's
// lexical path safety refuses (absolute, "..", control and look-alike
// characters), a ".git" segment in any letter case (the worker's own
// repository is its business; a source must not plant hooks or config there),
// and ".meshwork" at the root (the marketplace's private part of the workspace).
// It returns the path in canonical form.
func CheckPath(p string) (string, error) {
	if p == "" {
		return "", refused("an entry has an empty name")
	}
	clean, err := gate.CleanTarget(p)
	if err != nil {
		return "", refused("%q: %v", p, err)
	}
	if clean == "." {
		return "", refused("%q names the workspace root", p)
	}
	for seg := range strings.SplitSeq(clean, "/") {
		if strings.EqualFold(seg, ".git") {
			return "", refused("%q: .git directories are not taken from sources", p)
		}
	}
	if first, _, _ := strings.Cut(clean, "/"); strings.EqualFold(first, ".meshwork") {
		return "", refused("%q: .meshwork is reserved for the marketplace", p)
	}
	return clean, nil
}

// CheckLink refuses a symbolic link at p whose target leaves the workspace:
// absolute, or climbing above the root from the link's directory.
func CheckLink(p, target string) error {
	if target == "" {
		return refused("symbolic link %q has an empty target", p)
	}
	if strings.HasPrefix(target, "/") {
		return refused("symbolic link %q points to the absolute path %q, outside the workspace", p, target)
	}
	if strings.ContainsRune(target, 0) {
		return refused("symbolic link %q has a NUL byte in its target", p)
	}
	depth := strings.Count(path.Dir(p), "/")
	if path.Dir(p) != "." {
		depth++
	}
	for seg := range strings.SplitSeq(target, "/") {
		switch seg {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return refused("symbolic link %q points to %q, outside the workspace", p, target)
			}
		default:
			depth++
		}
	}
	return nil
}

// Draft is a base being built in memory. Every file added is checked; the
// first refusal is returned and the draft should be dropped.
type Draft struct {
	mem    *memory.Storage
	limits Limits
	files  map[string]Entry
	bytes  int64
	commit plumbing.Hash
	origin plumbing.Hash
}

// NewDraft returns an empty draft.
func NewDraft(limits Limits) *Draft {
	return &Draft{mem: memory.NewStorage(), limits: limits.withDefaults(), files: map[string]Entry{}}
}

// Storage is the draft's object store, for fetching a git source into.
func (d *Draft) Storage() *memory.Storage { return d.mem }

// Limits are the draft's limits, defaults filled in.
func (d *Draft) Limits() Limits { return d.limits }

// Files are the files added so far.
func (d *Draft) Files() map[string]Entry { return d.files }

// AddFile checks a file and stores its content as a blob. mode is
// filemode.Regular, Executable or Symlink (content is then the target).
func (d *Draft) AddFile(p string, mode filemode.FileMode, content io.Reader) error {
	clean, err := CheckPath(p)
	if err != nil {
		return err
	}
	if _, dup := d.files[clean]; dup {
		return refused("%q appears twice", clean)
	}
	if err := d.count(clean); err != nil {
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
	h, err := writeBlob(d.mem, data)
	if err != nil {
		return err
	}
	d.bytes += int64(len(data))
	d.files[clean] = Entry{Mode: mode, Hash: h, Size: int64(len(data))}
	return d.checkPrefixes(clean)
}

// count refuses one more file past the limit.
func (d *Draft) count(p string) error {
	if len(d.files)+1 > d.limits.MaxFiles {
		return refused("more than %d files (at %q)", d.limits.MaxFiles, p)
	}
	return nil
}

// checkPrefixes refuses a file that is also a directory of another file.
func (d *Draft) checkPrefixes(p string) error {
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if _, ok := d.files[dir]; ok {
			return refused("%q is both a file and a directory (of %q)", dir, p)
		}
	}
	return nil
}

// AddTree checks every file of a tree already in the draft's storage (a
// fetched commit's) and records it, as AddFile would. Submodules (gitlinks)
// are skipped: their content is another repository's.
func (d *Draft) AddTree(t *object.Tree) error {
	files, err := Flatten(t)
	if err != nil {
		return err
	}
	for p, e := range files {
		clean, err := CheckPath(p)
		if err != nil {
			return err
		}
		if err := d.count(clean); err != nil {
			return err
		}
		if e.Size, err = d.mem.EncodedObjectSize(e.Hash); err != nil {
			return fmt.Errorf("%q: %w", clean, err)
		}
		if e.Size > d.limits.MaxBytes-d.bytes {
			return refused("the files pass the limit of %d bytes at %q", d.limits.MaxBytes, clean)
		}
		if e.Mode == filemode.Symlink {
			target, err := readBlob(d.mem, e.Hash, 4096)
			if err != nil {
				return refused("symbolic link %q: %v", clean, err)
			}
			if err := CheckLink(clean, string(target)); err != nil {
				return err
			}
		}
		d.bytes += e.Size
		d.files[clean] = e
	}
	return nil
}

// SetCommit makes c the draft's base commit; origin is the git source's
// commit it descends from (zero for none).
func (d *Draft) SetCommit(c, origin plumbing.Hash) { d.commit, d.origin = c, origin }

// Commit writes the draft's files as a tree and a commit on parent (zero for
// none) and makes it the base commit.
func (d *Draft) Commit(message string, parent, origin plumbing.Hash) (plumbing.Hash, error) {
	tree, err := WriteTree(d.mem, d.files)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	c, err := WriteCommit(d.mem, tree, parent, message, time.Unix(0, 0))
	if err != nil {
		return plumbing.ZeroHash, err
	}
	d.SetCommit(c, origin)
	return c, nil
}

// Flatten lists a tree's files by path, their sizes unknown (-1).
// Submodules are left out.
func Flatten(t *object.Tree) (map[string]Entry, error) {
	out := map[string]Entry{}
	walker := object.NewTreeWalker(t, true, nil)
	defer walker.Close()
	for {
		name, e, err := walker.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading tree: %w", err)
		}
		switch e.Mode {
		case filemode.Dir, filemode.Submodule:
			continue
		}
		out[name] = Entry{Mode: e.Mode, Hash: e.Hash, Size: -1}
	}
}

// writeBlob stores data as a blob.
func writeBlob(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
	obj := s.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(data)))
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// WriteBlob stores data as a blob and returns its hash.
func WriteBlob(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
	return writeBlob(s, data)
}

// WriteTree stores the nested trees of a set of files and returns the root
// tree's hash. Blobs must be stored already.
func WriteTree(s storer.EncodedObjectStorer, files map[string]Entry) (plumbing.Hash, error) {
	return WriteTreeSkipping(s, files, nil)
}

// WriteTreeSkipping is WriteTree that does not store a tree for which have
// reports true (it is stored elsewhere already, e.g. in the base).
func WriteTreeSkipping(s storer.EncodedObjectStorer, files map[string]Entry, have func(plumbing.Hash) bool) (plumbing.Hash, error) {
	type dir struct {
		entries []object.TreeEntry
		subdirs map[string]*dir
	}
	root := &dir{subdirs: map[string]*dir{}}
	for p, e := range files {
		d := root
		segs := strings.Split(p, "/")
		for _, seg := range segs[:len(segs)-1] {
			sub := d.subdirs[seg]
			if sub == nil {
				sub = &dir{subdirs: map[string]*dir{}}
				d.subdirs[seg] = sub
			}
			d = sub
		}
		d.entries = append(d.entries, object.TreeEntry{Name: segs[len(segs)-1], Mode: e.Mode, Hash: e.Hash})
	}
	var write func(d *dir) (plumbing.Hash, error)
	write = func(d *dir) (plumbing.Hash, error) {
		entries := d.entries
		for name, sub := range d.subdirs {
			h, err := write(sub)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			entries = append(entries, object.TreeEntry{Name: name, Mode: filemode.Dir, Hash: h})
		}
		// Git orders tree entries by name, a directory's name as if it
		// ended in "/".
		key := func(e object.TreeEntry) string {
			if e.Mode == filemode.Dir {
				return e.Name + "/"
			}
			return e.Name
		}
		sort.Slice(entries, func(i, j int) bool { return key(entries[i]) < key(entries[j]) })
		t := object.Tree{Entries: entries}
		obj := &plumbing.MemoryObject{}
		if err := t.Encode(obj); err != nil {
			return plumbing.ZeroHash, err
		}
		if have != nil && have(obj.Hash()) {
			return obj.Hash(), nil
		}
		return s.SetEncodedObject(obj)
	}
	return write(root)
}

// WriteCommit stores a commit of tree on parent (zero for none), made by
// Meshwork at when. Base commits use a fixed time, so the same tree on the
// same parent is always the same commit.
func WriteCommit(s storer.EncodedObjectStorer, tree, parent plumbing.Hash, message string, when time.Time) (plumbing.Hash, error) {
	sig := object.Signature{Name: "Meshwork", Email: "meshwork@localhost", When: when.UTC()}
	c := object.Commit{Author: sig, Committer: sig, Message: message, TreeHash: tree}
	if !parent.IsZero() {
		c.ParentHashes = []plumbing.Hash{parent}
	}
	obj := &plumbing.MemoryObject{}
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return s.SetEncodedObject(obj)
}

// Remove drops a file from the draft (its blob stays, unreferenced).
func (d *Draft) Remove(p string) {
	if e, ok := d.files[p]; ok {
		d.bytes -= e.Size
		delete(d.files, p)
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

// WriteTar writes the draft's files as a tar stream to seed a workspace
// with, owned by owner: from memory, where the content already is.
func (d *Draft) WriteTar(w io.Writer, owner Owner, extra ...TarExtra) error {
	return WriteTar(w, d.mem, d.files, owner, extra...)
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
