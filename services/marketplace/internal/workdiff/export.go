package workdiff

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
)

// ErrNoOrigin is returned by WriteBundle for a base that did not come from
// a git source: there is no commit in the user's repository to build on.
var ErrNoOrigin = errors.New("the base did not come from a git source")

// WriteTar writes the workspace's files (private paths left out) as a tar,
// owned by owner, modified at mtime.
func (c *Change) WriteTar(w io.Writer, owner bases.Owner, mtime time.Time) error {
	return bases.WriteTar(w, c, c.files, owner, mtime)
}

// EncodedObject lets a Change serve as the object store of its own files:
// changed content from memory, the rest from the base.
func (c *Change) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	if obj, err := c.blobs.EncodedObject(t, h); err == nil {
		return obj, nil
	}
	return c.base.Storer().EncodedObject(t, h)
}

// WriteBundle writes a git bundle (v2) holding one commit, made by Meshwork
// at when with message, whose tree is the workspace and whose parent is the
// base's git commit: `git fetch <bundle>` in a clone that has that commit
// brings the change in as refs/heads/meshwork. It returns the commit.
func (c *Change) WriteBundle(w io.Writer, message string, when time.Time) (plumbing.Hash, error) {
	if c.base.Origin.IsZero() {
		return plumbing.ZeroHash, ErrNoOrigin
	}
	have, err := c.base.OriginObjects()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	out := memory.NewStorage()
	tree, err := bases.WriteTreeSkipping(out, c.files, func(h plumbing.Hash) bool { return have[h] })
	if err != nil {
		return plumbing.ZeroHash, err
	}
	commit, err := bases.WriteCommit(out, tree, c.base.Origin, message, when)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	for _, e := range c.files {
		if have[e.Hash] {
			continue
		}
		obj, err := c.EncodedObject(plumbing.BlobObject, e.Hash)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("bundling blob %s: %w", e.Hash, err)
		}
		if _, err := out.SetEncodedObject(obj); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	if _, err := fmt.Fprintf(w, "# v2 git bundle\n-%s\n%s refs/heads/meshwork\n\n", c.base.Origin, commit); err != nil {
		return plumbing.ZeroHash, err
	}
	var hashes []plumbing.Hash
	_ = out.ForEachObjectHash(func(h plumbing.Hash) error {
		hashes = append(hashes, h)
		return nil
	})
	// In one order, whatever the store's: the same change is the same
	// bundle, byte for byte.
	slices.SortFunc(hashes, func(a, b plumbing.Hash) int { return bytes.Compare(a[:], b[:]) })
	if err := bases.WritePack(w, out, hashes); err != nil {
		return plumbing.ZeroHash, err
	}
	return commit, nil
}
