package source

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
)

// MaxPatchBytes bounds a source patch.
const MaxPatchBytes = 32 << 20

// Patch builds the draft from another journey's base plus a patch (git's
// unified diff format, as workspace_diff produces): the result is a commit on
// that base, with the same origin, so bundles still build on the git source.
// A patch that does not apply is refused with the file and the reason.
func Patch(base *bases.Base, fromJourney, patch string, d *bases.Draft) (Record, error) {
	sum := sha256.Sum256([]byte(patch))
	rec := Record{Kind: "journey", Journey: fromJourney, PatchSHA256: hex.EncodeToString(sum[:]), Commit: base.Origin.String()}
	if base.Origin.IsZero() {
		rec.Commit = ""
	}
	if len(patch) > MaxPatchBytes {
		return rec, invalid("source.patch is %d bytes; the limit is %d", len(patch), MaxPatchBytes)
	}
	if err := CopyCommit(base.Storer(), d, base.Commit().Hash, base.Origin); err != nil {
		return rec, err
	}
	if err := d.AddTree(base.Tree()); err != nil {
		return rec, err
	}
	if strings.TrimSpace(patch) != "" {
		files, _, err := gitdiff.Parse(strings.NewReader(patch))
		if err != nil {
			return rec, invalid("source.patch is not a unified diff: %v", err)
		}
		if len(files) == 0 {
			return rec, invalid("source.patch holds no file changes")
		}
		for _, f := range files {
			if err := applyFile(d, f); err != nil {
				return rec, err
			}
		}
	}
	if _, err := d.Commit("Meshwork: patch "+rec.PatchSHA256[:12]+" on journey "+fromJourney, base.Commit().Hash, base.Origin); err != nil {
		return rec, err
	}
	rec.Files, rec.Bytes = len(d.Files()), d.Bytes()
	return rec, nil
}

// applyFile applies one file's change to the draft.
func applyFile(d *bases.Draft, f *gitdiff.File) error {
	name := f.NewName
	if f.IsDelete {
		name = f.OldName
	}
	var old []byte
	var oldEntry bases.Entry
	if !f.IsNew {
		var err error
		if old, oldEntry, err = d.Content(f.OldName); err != nil {
			if errors.Is(err, bases.ErrRefused) {
				return invalid("source.patch does not apply: %q is not in the base", f.OldName)
			}
			return err
		}
	} else if _, _, err := d.Content(f.NewName); err == nil {
		return invalid("source.patch does not apply: it creates %q, which is already in the base", f.NewName)
	}
	if f.IsBinary && !f.IsNew && !blobIs(oldEntry.Hash, f.OldOIDPrefix) {
		// A binary hunk replaces the content whole: only the blob it
		// names says it was made from this file, as git apply checks.
		return invalid("source.patch does not apply to %q: the base's file is %s, the patch was made from %s", f.OldName, oldEntry.Hash, f.OldOIDPrefix)
	}
	if f.IsDelete {
		d.Remove(f.OldName)
		return nil
	}
	var out bytes.Buffer
	if err := gitdiff.Apply(&out, bytes.NewReader(old), f); err != nil {
		return invalid("source.patch does not apply to %q: %v", name, err)
	}
	if f.IsBinary && !blobIs(plumbing.ComputeHash(plumbing.BlobObject, out.Bytes()), f.NewOIDPrefix) {
		return invalid("source.patch does not apply to %q: its binary hunk makes another file than its index line names (%s)", name, f.NewOIDPrefix)
	}
	mode := oldEntry.Mode
	if f.NewMode != 0 {
		mode = gitMode(f.NewMode)
	}
	if f.IsNew && f.NewMode == 0 {
		mode = filemode.Regular
	}
	if !f.IsNew && !f.IsCopy {
		d.Remove(f.OldName)
	}
	if err := d.AddFile(name, mode, &out); err != nil {
		if errors.Is(err, bases.ErrRefused) {
			return invalid("source.patch: %v", err)
		}
		return err
	}
	return nil
}

// gitMode maps a mode as go-gitdiff parses it to git's file modes.
func gitMode(m os.FileMode) filemode.FileMode {
	switch {
	case m&0o170000 == 0o120000:
		return filemode.Symlink
	case m&0o111 != 0:
		return filemode.Executable
	}
	return filemode.Regular
}

// blobIs reports whether a binary change's index line names blob h: git
// writes binary changes' blobs in full (and requires them).
func blobIs(h plumbing.Hash, prefix string) bool { return prefix == h.String() }
