package meshworker_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

type (
	gitStatusResult struct {
		Branch string `json:"branch"`
		Clean  bool   `json:"clean"`
		Files  []struct {
			Path     string `json:"path"`
			Staging  string `json:"staging"`
			Worktree string `json:"worktree"`
		} `json:"files"`
	}
	gitLogResult struct {
		Commits []struct {
			Hash    string `json:"hash"`
			Author  string `json:"author"`
			Email   string `json:"email"`
			Date    string `json:"date"`
			Message string `json:"message"`
		} `json:"commits"`
	}
	gitDiffResult struct {
		Diff string `json:"diff"`
	}
	gitCommitResult struct {
		Hash string `json:"hash"`
	}
	gitAddResult struct {
		Added []string `json:"added"`
	}
)

func (r gitStatusResult) states() map[string]string {
	m := map[string]string{}
	for _, f := range r.Files {
		m[f.Path] = f.Staging + "/" + f.Worktree
	}
	return m
}

var hashRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

func TestGit(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})
	if _, err := git.PlainInit(b.root, false); err != nil {
		t.Fatal(err)
	}
	var w writeResult
	b.ok(t, "write", map[string]any{"path": "README.md", "content": "# Project\n\nline 3\nline 4\n"}, &w)
	b.ok(t, "write", map[string]any{"path": "src/gone.go", "content": "package src\n"}, &w)

	// Before the first commit: untracked files on the default branch.
	var st gitStatusResult
	b.ok(t, "git_status", map[string]any{}, &st)
	if st.Branch != "master" || st.Clean {
		t.Errorf("status = %+v", st)
	}
	if got := st.states(); got["README.md"] != "untracked/untracked" || got["src/gone.go"] != "untracked/untracked" {
		t.Errorf("files = %v", got)
	}
	var log gitLogResult
	b.ok(t, "git_log", map[string]any{}, &log)
	if len(log.Commits) != 0 {
		t.Errorf("log before the first commit = %+v", log)
	}

	var add gitAddResult
	b.ok(t, "git_add", map[string]any{"paths": []string{"."}}, &add)
	b.ok(t, "git_status", map[string]any{}, &st)
	if got := st.states(); got["README.md"] != "added/unmodified" || got["src/gone.go"] != "added/unmodified" {
		t.Errorf("after add: %v", got)
	}
	var c1 gitCommitResult
	b.ok(t, "git_commit", map[string]any{"message": "Initial commit\n\nWith a body.", "author_name": "Ada", "author_email": "ada@example.com"}, &c1)
	if !hashRE.MatchString(c1.Hash) {
		t.Fatalf("commit hash %q", c1.Hash)
	}
	b.ok(t, "git_status", map[string]any{}, &st)
	if !st.Clean || len(st.Files) != 0 {
		t.Errorf("after commit: %+v", st)
	}
	b.fails(t, "git_commit", map[string]any{"message": "nothing to commit"}, "empty commit")

	// Modify, delete and add; stage only some of it.
	b.ok(t, "write", map[string]any{"path": "README.md", "content": "# Project\n\nline three\nline 4\n"}, &w)
	var d deleteResult
	b.ok(t, "delete", map[string]any{"path": "src/gone.go"}, &d)
	b.ok(t, "write", map[string]any{"path": "new.txt", "content": "brand new\n"}, &w)
	b.ok(t, "write", map[string]any{"path": "untracked.txt", "content": "not in the diff\n"}, &w)
	b.ok(t, "git_add", map[string]any{"paths": []string{"new.txt", "src"}}, &add)
	if strings.Join(add.Added, ",") != "new.txt,src" {
		t.Errorf("added = %q", add.Added)
	}
	b.ok(t, "git_status", map[string]any{}, &st)
	want := map[string]string{
		"README.md":     "unmodified/modified",
		"new.txt":       "added/unmodified",
		"src/gone.go":   "deleted/unmodified",
		"untracked.txt": "untracked/untracked",
	}
	if got := st.states(); len(got) != len(want) {
		t.Errorf("status files = %v, want %v", got, want)
	} else {
		for p, s := range want {
			if got[p] != s {
				t.Errorf("%s: %s, want %s", p, got[p], s)
			}
		}
	}

	var diff gitDiffResult
	b.ok(t, "git_diff", map[string]any{}, &diff)
	for _, want := range []string{
		"diff --git a/README.md b/README.md\n",
		"--- a/README.md\n+++ b/README.md\n",
		"@@ -1,4 +1,4 @@\n # Project\n \n-line 3\n+line three\n line 4\n",
		"diff --git a/new.txt b/new.txt\nnew file mode 100644\n",
		"--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+brand new\n",
		"diff --git a/src/gone.go b/src/gone.go\ndeleted file mode 100644\n",
		"--- a/src/gone.go\n+++ /dev/null\n@@ -1 +0,0 @@\n-package src\n",
	} {
		if !strings.Contains(diff.Diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff.Diff)
		}
	}
	if strings.Contains(diff.Diff, "untracked.txt") {
		t.Errorf("diff shows an untracked file:\n%s", diff.Diff)
	}
	if i, j := strings.Index(diff.Diff, "a/README.md"), strings.Index(diff.Diff, "b/src/gone.go"); i > j {
		t.Errorf("diff not in path order:\n%s", diff.Diff)
	}
	b.ok(t, "git_diff", map[string]any{"path": "src"}, &diff)
	if !strings.Contains(diff.Diff, "src/gone.go") || strings.Contains(diff.Diff, "README") {
		t.Errorf("diff of src:\n%s", diff.Diff)
	}

	var c2 gitCommitResult
	b.ok(t, "git_commit", map[string]any{"message": "Second"}, &c2)
	b.ok(t, "git_log", map[string]any{}, &log)
	if len(log.Commits) != 2 {
		t.Fatalf("log = %+v", log)
	}
	first, second := log.Commits[1], log.Commits[0]
	if second.Hash != c2.Hash || second.Author != "Meshwork" || second.Email != "meshwork@localhost" || second.Message != "Second\n" && second.Message != "Second" {
		t.Errorf("newest commit = %+v", second)
	}
	if first.Hash != c1.Hash || first.Author != "Ada" || first.Email != "ada@example.com" || !strings.HasPrefix(first.Message, "Initial commit\n\nWith a body.") || first.Date == "" {
		t.Errorf("first commit = %+v", first)
	}
	b.ok(t, "git_log", map[string]any{"max": 1}, &log)
	if len(log.Commits) != 1 || log.Commits[0].Hash != c2.Hash {
		t.Errorf("log max 1 = %+v", log)
	}
	// The unstaged README change was not committed: the diff still shows it.
	b.ok(t, "git_diff", map[string]any{}, &diff)
	if !strings.Contains(diff.Diff, "+line three") || strings.Contains(diff.Diff, "new.txt") {
		t.Errorf("diff after the second commit:\n%s", diff.Diff)
	}

	b.fails(t, "git_add", map[string]any{"paths": []string{"/etc/passwd"}}, "is absolute")
	b.fails(t, "git_add", map[string]any{"paths": []string{}}, "paths is required")
	b.fails(t, "git_commit", map[string]any{"message": " "}, "message is required")
	b.fails(t, "git_diff", map[string]any{"path": "/x"}, "is absolute")
	b.fails(t, "git_log", map[string]any{"max": -1}, "max must not be negative")
}

func TestGitNotARepository(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})
	for tool, args := range map[string]map[string]any{
		"git_status": {},
		"git_diff":   {},
		"git_log":    {},
		"git_add":    {"paths": []string{"."}},
		"git_commit": {"message": "m"},
	} {
		b.fails(t, tool, args, "not a git repository")
	}
}

// git_init makes an empty workspace a repository the other git tools can use,
// is idempotent, and is refused when read-only or with a bad branch name.
func TestGitInit(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})
	var first, again struct {
		Branch  string `json:"branch"`
		Created bool   `json:"created"`
	}
	b.ok(t, "git_init", map[string]any{}, &first)
	if !first.Created || first.Branch != "main" {
		t.Errorf("git_init: %+v", first)
	}
	b.ok(t, "git_init", map[string]any{"branch": "other"}, &again)
	if again.Created || again.Branch != "main" {
		t.Errorf("second git_init: %+v, want the existing main branch", again)
	}
	var wrote struct{}
	b.ok(t, "write", map[string]any{"path": "a.txt", "content": "x"}, &wrote)
	b.ok(t, "git_add", map[string]any{"paths": []string{"a.txt"}}, &wrote)
	var commit struct {
		Hash string `json:"hash"`
	}
	b.ok(t, "git_commit", map[string]any{"message": "first"}, &commit)
	if len(commit.Hash) != 40 {
		t.Errorf("commit hash %q", commit.Hash)
	}
	var status struct {
		Branch string `json:"branch"`
		Clean  bool   `json:"clean"`
	}
	b.ok(t, "git_status", map[string]any{}, &status)
	if status.Branch != "main" || !status.Clean {
		t.Errorf("status after commit: %+v", status)
	}
	b.fails(t, "git_init", map[string]any{"branch": "bad..name"}, "invalid branch name")
	ro := setup(t, meshworker.Config{Readonly: true})
	ro.fails(t, "git_init", map[string]any{}, "read-only")
}
