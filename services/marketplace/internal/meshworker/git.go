package meshworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

const defaultMaxCommits = 20

var errNotRepository = errors.New("not a git repository")

// openRepo opens the repository at the workspace root on a billy filesystem
// bound to it, so neither the working tree nor .git can lead outside. It is
// opened per call: a command may have run "git init" since the last one.
func (w *worker) openRepo() (*git.Repository, *git.Worktree, error) {
	storage, wtfs, err := w.repoFilesystems()
	if err != nil {
		return nil, nil, errNotRepository
	}
	repo, err := git.Open(storage, wtfs)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		return nil, nil, errNotRepository
	}
	if err != nil {
		return nil, nil, fmt.Errorf("opening the git repository: %w", err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		return nil, nil, fmt.Errorf("opening the git working tree: %w", err)
	}
	return repo, wt, nil
}

// repoFilesystems returns the workspace as go-git sees it: the working tree and
// the storage in its .git directory, both on a billy filesystem bound to the
// workspace root (osfs.WithBoundOS), so no path or link in either can lead
// outside. Opening and creating the repository both go through it, so the
// bound is set in one place.
func (w *worker) repoFilesystems() (*filesystem.Storage, billy.Filesystem, error) {
	wtfs := osfs.New(w.absRoot, osfs.WithBoundOS())
	dot, err := wtfs.Chroot(git.GitDirName)
	if err != nil {
		return nil, nil, err
	}
	return filesystem.NewStorage(dot, cache.NewObjectLRUDefault()), wtfs, nil
}

type gitStatusIn struct{}

type gitFileStatus struct {
	Path     string `json:"path" jsonschema:"file path relative to the workspace root"`
	Staging  string `json:"staging" jsonschema:"index against HEAD: unmodified, untracked, modified, added, deleted, renamed, copied or unmerged"`
	Worktree string `json:"worktree" jsonschema:"working tree against the index, same values as staging"`
}

type gitStatusOut struct {
	Branch string          `json:"branch" jsonschema:"the current branch, or HEAD when detached"`
	Clean  bool            `json:"clean" jsonschema:"true when nothing is staged, modified or untracked"`
	Files  []gitFileStatus `json:"files" jsonschema:"the files that are not unmodified, sorted by path"`
}

func (w *worker) gitStatus(_ context.Context, _ gitStatusIn) (gitStatusOut, error) {
	w.gitMu.Lock()
	defer w.gitMu.Unlock()
	repo, wt, err := w.openRepo()
	if err != nil {
		return gitStatusOut{}, err
	}
	st, err := wt.Status()
	if err != nil {
		return gitStatusOut{}, fmt.Errorf("git status: %w", err)
	}
	out := gitStatusOut{Branch: branch(repo), Clean: st.IsClean(), Files: []gitFileStatus{}}
	for p, fs := range st {
		out.Files = append(out.Files, gitFileStatus{Path: p, Staging: statusName(fs.Staging), Worktree: statusName(fs.Worktree)})
	}
	slices.SortFunc(out.Files, func(a, b gitFileStatus) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// branch names HEAD's branch, also before the first commit, when HEAD
// points to a branch that does not exist yet.
func branch(repo *git.Repository) string {
	head, err := repo.Storer.Reference(plumbing.HEAD)
	if err != nil {
		return ""
	}
	if head.Type() == plumbing.SymbolicReference && head.Target().IsBranch() {
		return head.Target().Short()
	}
	return "HEAD"
}

func statusName(c git.StatusCode) string {
	switch c {
	case git.Unmodified:
		return "unmodified"
	case git.Untracked:
		return "untracked"
	case git.Modified:
		return "modified"
	case git.Added:
		return "added"
	case git.Deleted:
		return "deleted"
	case git.Renamed:
		return "renamed"
	case git.Copied:
		return "copied"
	case git.UpdatedButUnmerged:
		return "unmerged"
	}
	return string(rune(c))
}

type gitLogIn struct {
	Max int `json:"max,omitempty" jsonschema:"the most commits returned (default 20)"`
}

type gitCommit struct {
	Hash    string `json:"hash" jsonschema:"the commit hash"`
	Author  string `json:"author" jsonschema:"the author's name"`
	Email   string `json:"email" jsonschema:"the author's email"`
	Date    string `json:"date" jsonschema:"the author date, RFC 3339"`
	Message string `json:"message" jsonschema:"the full commit message"`
}

type gitLogOut struct {
	Commits []gitCommit `json:"commits" jsonschema:"newest first; empty before the first commit"`
}

func (w *worker) gitLog(_ context.Context, in gitLogIn) (gitLogOut, error) {
	limit, err := countLimit("max", in.Max, defaultMaxCommits)
	if err != nil {
		return gitLogOut{}, err
	}
	w.gitMu.Lock()
	defer w.gitMu.Unlock()
	repo, _, err := w.openRepo()
	if err != nil {
		return gitLogOut{}, err
	}
	out := gitLogOut{Commits: []gitCommit{}}
	iter, err := repo.Log(&git.LogOptions{Order: git.LogOrderCommitterTime})
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return out, nil // no commit yet
	}
	if err != nil {
		return gitLogOut{}, fmt.Errorf("git log: %w", err)
	}
	defer iter.Close()
	for len(out.Commits) < limit {
		c, err := iter.Next()
		if err != nil {
			break // io.EOF, or a broken object: return what was read
		}
		out.Commits = append(out.Commits, gitCommit{
			Hash:    c.Hash.String(),
			Author:  c.Author.Name,
			Email:   c.Author.Email,
			Date:    c.Author.When.Format(time.RFC3339),
			Message: c.Message,
		})
	}
	return out, nil
}

type gitAddIn struct {
	Paths []string `json:"paths" jsonschema:"files or directories to stage, relative to the workspace root; \".\" stages everything not ignored"`
}

type gitAddOut struct {
	Added []string `json:"added" jsonschema:"the paths staged"`
}

func (w *worker) gitAdd(_ context.Context, in gitAddIn) (gitAddOut, error) {
	defer w.quota.Invalidate() // git writes objects and the index
	if w.cfg.Readonly {
		return gitAddOut{}, errReadonly
	}
	if len(in.Paths) == 0 {
		return gitAddOut{}, errors.New("paths is required")
	}
	paths := make([]string, 0, len(in.Paths))
	for _, p := range in.Paths {
		p, err := relPath(p, false)
		if err != nil {
			return gitAddOut{}, err
		}
		if _, err := w.guard("git add", p, true); err != nil {
			return gitAddOut{}, err
		}
		paths = append(paths, display(p))
	}
	w.gitMu.Lock()
	defer w.gitMu.Unlock()
	_, wt, err := w.openRepo()
	if err != nil {
		return gitAddOut{}, err
	}
	for _, p := range paths {
		if p == "." {
			err = wt.AddWithOptions(&git.AddOptions{All: true})
		} else {
			_, err = wt.Add(p)
		}
		if err != nil {
			return gitAddOut{}, fmt.Errorf("git add %s: %w", p, err)
		}
	}
	return gitAddOut{Added: paths}, nil
}

type gitCommitIn struct {
	Message     string `json:"message" jsonschema:"the commit message"`
	AuthorName  string `json:"author_name,omitempty" jsonschema:"the author's name (default Meshwork)"`
	AuthorEmail string `json:"author_email,omitempty" jsonschema:"the author's email (default meshwork@localhost)"`
}

type gitCommitOut struct {
	Hash string `json:"hash" jsonschema:"the new commit's hash"`
}

func (w *worker) gitCommit(_ context.Context, in gitCommitIn) (gitCommitOut, error) {
	defer w.quota.Invalidate() // git writes objects and the index
	if w.cfg.Readonly {
		return gitCommitOut{}, errReadonly
	}
	if strings.TrimSpace(in.Message) == "" {
		return gitCommitOut{}, errors.New("message is required")
	}
	sig := &object.Signature{Name: in.AuthorName, Email: in.AuthorEmail, When: time.Now()}
	if sig.Name == "" {
		sig.Name = "Meshwork"
	}
	if sig.Email == "" {
		sig.Email = "meshwork@localhost"
	}
	w.gitMu.Lock()
	defer w.gitMu.Unlock()
	_, wt, err := w.openRepo()
	if err != nil {
		return gitCommitOut{}, err
	}
	h, err := wt.Commit(in.Message, &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		return gitCommitOut{}, fmt.Errorf("git commit: %w", err)
	}
	return gitCommitOut{Hash: h.String()}, nil
}

type gitInitIn struct {
	Branch string `json:"branch,omitempty" jsonschema:"name of the initial branch (default main)"`
}

type gitInitOut struct {
	Branch  string `json:"branch" jsonschema:"the initial branch"`
	Created bool   `json:"created" jsonschema:"false when the workspace already was a repository"`
}

// gitInit makes the workspace a repository (a fresh workspace is empty, and
// git_v1 has no shell to run "git init" with). It is idempotent.
func (w *worker) gitInit(_ context.Context, in gitInitIn) (gitInitOut, error) {
	defer w.quota.Invalidate() // git writes objects and the index
	if w.cfg.Readonly {
		return gitInitOut{}, errReadonly
	}
	branch := in.Branch
	if branch == "" {
		branch = "main"
	}
	ref := plumbing.NewBranchReferenceName(branch)
	if err := ref.Validate(); err != nil || strings.ContainsAny(branch, " \t\n") {
		return gitInitOut{}, fmt.Errorf("invalid branch name %q", branch)
	}
	if repo, _, err := w.openRepo(); err == nil {
		head, err := repo.Reference(plumbing.HEAD, false)
		if err == nil {
			branch = head.Target().Short()
		}
		return gitInitOut{Branch: branch, Created: false}, nil
	}
	storage, wtfs, err := w.repoFilesystems()
	if err != nil {
		return gitInitOut{}, fmt.Errorf("creating .git: %w", err)
	}
	if _, err := git.InitWithOptions(storage, wtfs, git.InitOptions{DefaultBranch: ref}); err != nil {
		return gitInitOut{}, fmt.Errorf("initialising the repository: %w", err)
	}
	return gitInitOut{Branch: branch, Created: true}, nil
}
