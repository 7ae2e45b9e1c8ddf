package bases

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// treeBomb stores levels trees of width entries, each entry of a level
// naming the one tree below it, over a tree of width files: width^(levels+1)
// paths from levels+2 objects.
func treeBomb(t *testing.T, s storer.EncodedObjectStorer, width, levels int) *object.Tree {
	t.Helper()
	blob, err := WriteBlob(s, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	store := func(mode filemode.FileMode, h plumbing.Hash) plumbing.Hash {
		tree := &object.Tree{}
		for i := range width {
			tree.Entries = append(tree.Entries, object.TreeEntry{Name: fmt.Sprintf("e%03d", i), Mode: mode, Hash: h})
		}
		obj := s.NewEncodedObject()
		if err := tree.Encode(obj); err != nil {
			t.Fatal(err)
		}
		h, err := s.SetEncodedObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := store(filemode.Regular, blob)
	for range levels {
		h = store(filemode.Dir, h)
	}
	tree, err := object.GetTree(s, h)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// A tree that names one subtree many times is refused once its walk passes
// the bound, not expanded first: eight levels of a hundred are 10^18
// paths, which the walk would never finish.
func TestAddTreeRefusesATreeBomb(t *testing.T) {
	t.Parallel()
	d := NewDraft(Limits{MaxFiles: 1000})
	err := d.AddTree(treeBomb(t, d.Storage(), 100, 8))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "more than 2000 files and directories") {
		t.Fatalf("AddTree of a tree bomb: %v", err)
	}
}

func TestFlattenBound(t *testing.T) {
	t.Parallel()
	d := NewDraft(Limits{})
	tree := treeBomb(t, d.Storage(), 10, 2) // 1,000 files under 110 directories
	for _, tt := range []struct {
		max     int
		files   int
		refused bool
	}{{0, 1000, false}, {1110, 1000, false}, {1109, 0, true}} {
		files, err := Flatten(tree, tt.max)
		if errors.Is(err, ErrRefused) != tt.refused || len(files) != tt.files {
			t.Errorf("Flatten(max %d) = %d files, %v; want %d files, refused %v", tt.max, len(files), err, tt.files, tt.refused)
		}
	}
}

// A tree that names a subtree the store does not have is an error, not a
// tree without that directory's files.
func TestFlattenRefusesAMissingSubtree(t *testing.T) {
	t.Parallel()
	d := NewDraft(Limits{})
	blob, err := WriteBlob(d.Storage(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	missing := plumbing.NewHash("0123456789012345678901234567890123456789")
	obj := d.Storage().NewEncodedObject()
	tree := &object.Tree{Entries: []object.TreeEntry{
		{Name: "a.txt", Mode: filemode.Regular, Hash: blob},
		{Name: "lib", Mode: filemode.Dir, Hash: missing},
		{Name: "z.txt", Mode: filemode.Regular, Hash: blob},
	}}
	if err := tree.Encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := d.Storage().SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	root, err := object.GetTree(d.Storage(), h)
	if err != nil {
		t.Fatal(err)
	}
	files, err := Flatten(root, 0)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), `the directory "lib" (tree 0123456789012345678901234567890123456789) is missing`) {
		t.Fatalf("Flatten = %v, %v; want the missing directory named", files, err)
	}
}

// A base keeps what its commit and origin reach, and nothing else that
// came with them: another branch's commit and files stay out.
func TestKeepWritesWhatTheBaseReaches(t *testing.T) {
	t.Parallel()
	store, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := NewDraft(Limits{})
	commitOf := func(file, content string, parent plumbing.Hash) (plumbing.Hash, plumbing.Hash) {
		t.Helper()
		blob, err := WriteBlob(d.Storage(), []byte(content))
		if err != nil {
			t.Fatal(err)
		}
		tree, err := WriteTree(d.Storage(), map[string]Entry{"dir/" + file: {Mode: filemode.Regular, Hash: blob}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := WriteCommit(d.Storage(), tree, parent, file, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		return c, blob
	}
	origin, originBlob := commitOf("origin.txt", "origin", plumbing.ZeroHash)
	base, baseBlob := commitOf("base.txt", "base", origin)
	other, otherBlob := commitOf("other.txt", "another branch", plumbing.ZeroHash)
	if err := d.SetCommit(base, origin); err != nil {
		t.Fatal(err)
	}
	b := keepAndOpen(t, store, d)
	defer b.Close()
	for h, want := range map[plumbing.Hash]bool{base: true, baseBlob: true, origin: true, originBlob: true, other: false, otherBlob: false} {
		_, err := b.Storer().EncodedObject(plumbing.AnyObject, h)
		if (err == nil) != want {
			t.Errorf("object %s in the base: %v, want %v", h, err == nil, want)
		}
	}
}

// History older than the base commit is as the source had it: a parent that
// names a blob, or is missing, is left out of the base, not a failed Keep
// (which runs after the worker exists).
func TestKeepTakesABrokenHistory(t *testing.T) {
	t.Parallel()
	store, err := NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := NewDraft(Limits{})
	blob, err := WriteBlob(d.Storage(), []byte("not a commit"))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := WriteTree(d.Storage(), map[string]Entry{"a.txt": {Mode: filemode.Regular, Hash: blob}})
	if err != nil {
		t.Fatal(err)
	}
	missing := plumbing.NewHash("0123456789012345678901234567890123456789")
	for _, parent := range []plumbing.Hash{blob, missing} {
		c, err := WriteCommit(d.Storage(), tree, parent, "on a broken parent", time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.SetCommit(c, plumbing.ZeroHash); err != nil {
			t.Fatal(err)
		}
		b := keepAndOpen(t, store, d)
		if files, err := b.Files(); err != nil || len(files) != 1 {
			t.Errorf("the base's files: %v, %v", files, err)
		}
		_ = b.Close()
	}
}

// keepAndOpen keeps d as a new journey's base in store and opens it.
func keepAndOpen(t *testing.T, store *Store, d *Draft) *Base {
	t.Helper()
	uid := uuid.New()
	rec, err := store.Keep(uid, d)
	if err != nil {
		t.Fatalf("Keep: %v", err)
	}
	b, err := store.Open(uid, rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
