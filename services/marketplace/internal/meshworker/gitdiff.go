package meshworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/meshwork/meshwork/services/marketplace/internal/unidiff"
)

type gitDiffIn struct {
	Path string `json:"path,omitempty" jsonschema:"only this file or directory, relative to the workspace root (default: everything)"`
}

type gitDiffOut struct {
	Diff string `json:"diff" jsonschema:"unified diff (git format) of the working tree against HEAD; untracked files are not included"`
}

// gitDiff is "git diff HEAD": go-git diffs trees, not the working tree, so
// the changed paths come from the status, their old side from HEAD's tree
// and their new side from the files, and go-git's own encoder writes the
// patch.
func (w *worker) gitDiff(ctx context.Context, in gitDiffIn) (gitDiffOut, error) {
	only, err := relPath(in.Path, true)
	if err != nil {
		return gitDiffOut{}, err
	}
	if in.Path != "" { // no path is the whole diff, as the gate sees it
		if _, err := w.guard("git diff", only, true); err != nil {
			return gitDiffOut{}, err
		}
	}
	only = display(only)
	w.gitMu.Lock()
	defer w.gitMu.Unlock()
	repo, wt, err := w.openRepo()
	if err != nil {
		return gitDiffOut{}, err
	}
	st, err := wt.Status()
	if err != nil {
		return gitDiffOut{}, fmt.Errorf("git diff: %w", err)
	}
	head, err := headTree(repo)
	if err != nil {
		return gitDiffOut{}, fmt.Errorf("git diff: %w", err)
	}

	var paths []string
	for p, s := range st {
		if s.Staging == git.Untracked || (s.Staging == git.Unmodified && s.Worktree == git.Unmodified) {
			continue
		}
		if (only == "." || p == only || strings.HasPrefix(p, only+"/")) && !w.diffHidden(p) {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)

	var patches []*unidiff.FilePatch
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return gitDiffOut{}, err
		}
		from, err := w.headSide(head, p)
		if err != nil {
			return gitDiffOut{}, fmt.Errorf("git diff %s: %w", p, err)
		}
		to, err := w.worktreeSide(p)
		if err != nil {
			return gitDiffOut{}, fmt.Errorf("git diff %s: %w", p, err)
		}
		if fp, ok := filePatchOf(from, to); ok {
			patches = append(patches, fp)
		}
	}
	var b strings.Builder
	if err := unidiff.Encode(&b, patches); err != nil {
		return gitDiffOut{}, fmt.Errorf("git diff: %w", err)
	}
	return gitDiffOut{Diff: b.String()}, nil
}

// diffHidden reports whether the diff leaves out the file p, a path of the
// status: a patch shows the file's content, so the path as git names it
// and the path it resolves to in the working tree must both be allowed.
func (w *worker) diffHidden(p string) bool {
	if w.policy == nil {
		return false
	}
	if w.policy.all.PathDenied(p) {
		return true
	}
	resolved, err := w.resolve(p, true)
	return err != nil || w.policy.all.PathDenied(resolved)
}

// headTree is HEAD's tree, or nil before the first commit.
func headTree(repo *git.Repository) (*object.Tree, error) {
	ref, err := repo.Head()
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := repo.CommitObject(ref.Hash())
	if err != nil {
		return nil, err
	}
	return c.Tree()
}

// side is one side of a file's diff; nil when the file does not exist there.
type side struct {
	path    string
	hash    plumbing.Hash
	mode    filemode.FileMode
	content []byte
	// binary is set for content unidiff.IsBinary lists (a NUL byte, or not
	// UTF-8), and for content over the size limit, which is not read.
	binary bool
}

// file is the side as the diff encoder sees it; nil for none.
func (s *side) file() *unidiff.File {
	if s == nil {
		return nil
	}
	return unidiff.NewFile(s.path, s.mode, s.hash)
}

func (w *worker) headSide(head *object.Tree, p string) (*side, error) {
	if head == nil {
		return nil, nil
	}
	f, err := head.File(p)
	if errors.Is(err, object.ErrFileNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &side{path: p, hash: f.Hash, mode: f.Mode}
	if f.Size > w.cfg.MaxFileSize {
		s.binary = true
		return s, nil
	}
	r, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if s.content, err = io.ReadAll(r); err != nil {
		return nil, err
	}
	s.binary = unidiff.IsBinary(s.content)
	return s, nil
}

// worktreeSide reads the file through the root, like every other tool. A
// symbolic link's side is its target text, as git stores it.
func (w *worker) worktreeSide(p string) (*side, error) {
	fi, err := w.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &side{path: p, mode: filemode.Regular}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := w.root.Readlink(p)
		if err != nil {
			return nil, err
		}
		s.mode, s.content = filemode.Symlink, []byte(target)
	case fi.IsDir():
		return nil, nil // a file replaced by a directory: its files are listed apart
	default:
		if fi.Mode()&0o111 != 0 {
			s.mode = filemode.Executable
		}
		s.content, err = w.readFile(p)
		if err != nil && fi.Size() > w.cfg.MaxFileSize {
			// Too large to diff: the hash is unknown without reading it, so
			// the zero hash keeps the header honest.
			s.binary = true
			return s, nil
		}
		if err != nil {
			return nil, err
		}
	}
	s.hash = plumbing.ComputeHash(plumbing.BlobObject, s.content)
	s.binary = unidiff.IsBinary(s.content)
	return s, nil
}

// filePatchOf diffs two sides; ok is false when they are the same.
func filePatchOf(from, to *side) (*unidiff.FilePatch, bool) {
	switch {
	case from == nil && to == nil:
		return nil, false
	case from != nil && to != nil && from.hash == to.hash && from.mode == to.mode && !from.hash.IsZero():
		return nil, false
	case from != nil && to != nil && from.hash == to.hash && !from.hash.IsZero():
		return unidiff.Text(from.file(), to.file(), nil, nil), true // a mode change: headers only
	}
	if (from != nil && from.binary) || (to != nil && to.binary) {
		return unidiff.Binary(from.file(), to.file()), true
	}
	var src, dst []byte
	if from != nil {
		src = from.content
	}
	if to != nil {
		dst = to.content
	}
	return unidiff.Text(from.file(), to.file(), src, dst), true
}
