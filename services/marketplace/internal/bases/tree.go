package bases

import (
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

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/gitpath"
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

// MaxLinkTarget is the longest symbolic link target a base takes: Linux's
// PATH_MAX less its NUL, so that every link a base holds can be made.
const MaxLinkTarget = 4095

// MaxEntries bounds the entries (files and directories) a source's tree or
// archive may hold while it is read, before its files are counted: twice
// the files, room for a directory each.
func (l Limits) MaxEntries() int { return 2 * l.MaxFiles }

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
// characters), a ".git" segment in any form git knows it by (the worker's own
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
	if gitpath.HasDotGit(clean) {
		return "", refused("%q: .git directories are not taken from sources (in any letter case, nor a name another file system takes for one, such as .git. or GIT~1)", p)
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
	if len(target) > MaxLinkTarget {
		return refused("symbolic link %q has a target of %d bytes; at most %d are taken", p, len(target), MaxLinkTarget)
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

// LinkThroughLink finds a symbolic link (of links, by path to target) whose
// target goes through another of them: each link is checked alone
// (CheckLink), and a chain of them could climb out of the workspace where
// none does by itself (a/up -> .. and x -> a/up/.. name the workspace's
// parent). It returns the link and the link its target goes through.
func LinkThroughLink(links map[string]string) (link, through string, ok bool) {
	for p, target := range links {
		at := path.Dir(p)
		segs := strings.Split(target, "/")
		for i, seg := range segs {
			at = path.Join(at, seg)
			if i == len(segs)-1 {
				break // the last segment may name a link: it is checked itself
			}
			if _, ok := links[at]; ok {
				return p, at, true
			}
		}
	}
	return "", "", false
}

// Flatten lists a tree's files by path, their sizes unknown (-1).
// Submodules are left out. maxEntries, when positive, bounds the entries
// (files and directories) it walks: a tree may name one subtree many times,
// so a repository of a few kilobytes can hold more paths than any memory
// (eight levels of a hundred entries that all name the next level are
// 10^16 files), and a tree from a source is refused once it passes the bound.
func Flatten(t *object.Tree, maxEntries int) (map[string]Entry, error) {
	out := map[string]Entry{}
	walker := object.NewTreeWalker(t, true, nil)
	defer walker.Close()
	for entries := 1; ; entries++ {
		name, e, err := walker.Next()
		if errors.Is(err, io.EOF) {
			if name != "" {
				// go-git's walker ends the walk at a subtree it cannot
				// read, as if the tree ended there: the files below it
				// would be left out without a word.
				return nil, refused("the directory %q (tree %s) is missing or is not a tree: the repository is incomplete", name, e.Hash)
			}
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading tree: %w", err)
		}
		if maxEntries > 0 && entries > maxEntries {
			return nil, refused("the tree has more than %d files and directories (at %q)", maxEntries, name)
		}
		mode := e.Mode
		switch mode {
		case filemode.Dir, filemode.Submodule:
			continue
		case filemode.Regular, filemode.Executable, filemode.Symlink:
		case filemode.Deprecated:
			mode = filemode.Regular // 100664, from old gits: a plain file
		default:
			return nil, refused("%q has the file mode %s, which is not a file, an executable or a symbolic link", name, mode)
		}
		if _, dup := out[name]; dup {
			return nil, refused("%q appears twice in a tree", name)
		}
		out[name] = Entry{Mode: mode, Hash: e.Hash, Size: -1}
	}
}

// WriteBlob stores data as a blob and returns its hash.
func WriteBlob(s storer.EncodedObjectStorer, data []byte) (plumbing.Hash, error) {
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
