package source_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
)

// A repository whose directories nest deeper than any path the gate takes
// is refused while it is copied, before its depth can take the stack.
func TestCopyCommitRefusesDeepTrees(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		levels  int
		refused bool
	}{{100, false}, {3000, true}} {
		src := memory.NewStorage()
		h, err := bases.WriteBlob(src, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		mode, name := filemode.Regular, "f"
		for range tt.levels {
			tree := &object.Tree{Entries: []object.TreeEntry{{Name: name, Mode: mode, Hash: h}}}
			obj := src.NewEncodedObject()
			if err := tree.Encode(obj); err != nil {
				t.Fatal(err)
			}
			if h, err = src.SetEncodedObject(obj); err != nil {
				t.Fatal(err)
			}
			mode, name = filemode.Dir, "d"
		}
		sig := object.Signature{Name: "t", Email: "t@example.com", When: time.Unix(0, 0)}
		obj := src.NewEncodedObject()
		if err := (&object.Commit{Author: sig, Committer: sig, TreeHash: h, Message: "deep\n"}).Encode(obj); err != nil {
			t.Fatal(err)
		}
		commit, err := src.SetEncodedObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		err = source.CopyCommit(src, bases.NewDraft(bases.Limits{}), commit, plumbing.ZeroHash)
		if got := errors.Is(err, bases.ErrRefused) && strings.Contains(err.Error(), "nest deeper than 2048"); got != tt.refused || (!tt.refused && err != nil) {
			t.Errorf("%d levels: CopyCommit = %v", tt.levels, err)
		}
	}
}
