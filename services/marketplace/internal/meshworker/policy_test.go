package meshworker_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

// The gate checks the globs on the path an action names; os.Root follows
// links that stay inside the workspace. These tests make such links, as a
// command or an agent could, and check that the worker applies the globs to
// where a path really leads.

const envSecret = "API_KEY=hunter2-in-the-env-file"

// policyGlobs are the filesystem workers' globs for secrets and git.
var policyGlobs = []string{"**/.env", ".git/**"}

// policyWorkspace makes a workspace with a denied .env and .git, and links
// into them beside ordinary ones.
func policyWorkspace(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		".env":                         envSecret + "\n",
		"README.md":                    "# readme\n",
		".git/config":                  "[core]\n",
		".git/hooks/pre-commit.sample": "#!/bin/sh\n",
		"sub/file.txt":                 "sub file\n",
	})
	for link, target := range map[string]string{
		"notes.md":    ".env",
		"d":           ".git",
		"a":           "b", // a -> b -> .env
		"b":           ".env",
		"via":         "sub/../.env",
		"sub/up":      "../.env",
		"readme-link": "README.md",
		"dirlink":     "sub",
		"loop1":       "loop2",
		"loop2":       "loop1",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func policySetup(t *testing.T) *bundle {
	t.Helper()
	return setup(t, meshworker.Config{Root: policyWorkspace(t), DeniedPaths: policyGlobs})
}

// snapshot maps every path below dir to its content (or link target), to
// show that nothing there changed.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			m[p] = "-> " + target
			return err
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			m[p] = string(b)
			return err
		}
		m[p] = "dir"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPathPolicyRead(t *testing.T) {
	t.Parallel()
	b := policySetup(t)

	msg := b.fails(t, "read", map[string]any{"path": "notes.md"}, "")
	if want := `path "notes.md" resolves to ".env", which this worker may not access`; msg != want {
		t.Errorf("message = %q, want %q", msg, want)
	}
	for p, want := range map[string]string{
		"a":                `path "a" resolves to ".env"`, // a chain of links
		"b":                `path "b" resolves to ".env"`,
		"via":              `path "via" resolves to ".env"`,
		"sub/up":           `path "sub/up" resolves to ".env"`,
		"dirlink/up":       `path "dirlink/up" resolves to ".env"`,
		"d/config":         `path "d/config" resolves to ".git/config"`,
		"./d//config":      `path "d/config" resolves to ".git/config"`,
		"sub/../notes.md":  `path "notes.md" resolves to ".env"`,
		".env":             `this worker may not access path ".env"`,
		"sub/../.env":      `this worker may not access path ".env"`,
		".git/config":      `this worker may not access path ".git/config"`,
		"loop1":            "read loop1: too many levels of symbolic links",
		"dirlink/../../.x": "escapes",
	} {
		msg := b.fails(t, "read", map[string]any{"path": p}, want)
		if strings.Contains(msg, "hunter2") {
			t.Errorf("read %s revealed the denied file: %s", p, msg)
		}
	}

	// Links to allowed files work as before.
	var r readResult
	b.ok(t, "read", map[string]any{"path": "readme-link"}, &r)
	if r.Content != "# readme\n" || r.Path != "readme-link" {
		t.Errorf("read through a link = %+v", r)
	}
	b.ok(t, "read", map[string]any{"path": "dirlink/file.txt"}, &r)
	if r.Content != "sub file\n" {
		t.Errorf("read through a directory link = %+v", r)
	}
}

func TestPathPolicyWrite(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	before := snapshot(t, b.root)

	for p, want := range map[string]string{
		"d/hooks/pre-commit": `path "d/hooks/pre-commit" resolves to ".git/hooks/pre-commit"`,
		"d/hooks/x":          `resolves to ".git/hooks/x"`,
		"d/config":           `resolves to ".git/config"`,
		"d/new/dir/x":        `resolves to ".git/new/dir/x"`, // directories the write would create
		"notes.md":           `resolves to ".env"`,
		"a":                  `resolves to ".env"`,
		".git/hooks/x":       `this worker may not access path ".git/hooks/x"`,
		"loop1/x":            "too many levels of symbolic links",
	} {
		b.fails(t, "write", map[string]any{"path": p, "content": "#!/bin/sh\necho pwned\n"}, want)
	}
	if after := snapshot(t, b.root); !mapsEqual(before, after) {
		t.Errorf("the workspace changed:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Lstat(filepath.Join(b.root, ".git", "hooks", "x")); err == nil {
		t.Error(".git/hooks/x was created")
	}

	// Writing through a link to an allowed directory still works.
	var w writeResult
	b.ok(t, "write", map[string]any{"path": "dirlink/new.txt", "content": "new"}, &w)
	if got := readFile(t, filepath.Join(b.root, "sub", "new.txt")); got != "new" {
		t.Errorf("sub/new.txt = %q", got)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestPathPolicyDelete(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	b.fails(t, "delete", map[string]any{"path": "d/config"}, `resolves to ".git/config"`)
	b.fails(t, "delete", map[string]any{"path": "d/hooks", "recursive": true}, `resolves to ".git/hooks"`)
	b.fails(t, "delete", map[string]any{"path": "sub/../.env"}, `may not access path ".env"`)
	// Deleting a link removes the link, never its target: allowed.
	var d deleteResult
	b.ok(t, "delete", map[string]any{"path": "notes.md"}, &d)
	b.ok(t, "delete", map[string]any{"path": "d/", "recursive": true}, &d)
	for _, p := range []string{".env", ".git/config", ".git/hooks/pre-commit.sample"} {
		if _, err := os.Stat(filepath.Join(b.root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{"notes.md", "d"} {
		if _, err := os.Lstat(filepath.Join(b.root, p)); err == nil {
			t.Errorf("link %s still exists", p)
		}
	}
}

func TestPathPolicyList(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	testListCases(t, b, []listCase{
		{
			// Left out: .env and .git by name; a, b, notes.md, via and d by
			// where they lead; loop1 and loop2 because they lead nowhere.
			name: "root",
			args: map[string]any{},
			want: []string{"README.md", "dirlink", "readme-link", "sub"},
		},
		{
			name: "recursive",
			args: map[string]any{"recursive": true},
			want: []string{"README.md", "dirlink", "readme-link", "sub", "sub/file.txt"},
		},
		{
			name: "a link to an allowed directory",
			args: map[string]any{"path": "dirlink", "recursive": true},
			want: []string{"dirlink/file.txt"},
		},
		{
			name:          "capped: left out entries do not count",
			args:          map[string]any{"max_entries": 2},
			want:          []string{"README.md", "dirlink"},
			wantTruncated: true,
		},
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		b.fails(t, "list", map[string]any{"path": "d"}, `path "d" resolves to ".git", which this worker may not access`)
		b.fails(t, "list", map[string]any{"path": "d/hooks"}, `resolves to ".git/hooks"`)
		b.fails(t, "list", map[string]any{"path": ".git"}, `may not access path ".git"`)
	})
}

func TestPathPolicySearch(t *testing.T) {
	t.Parallel()
	b := policySetup(t)
	var r searchResult
	b.ok(t, "search", map[string]any{"pattern": "."}, &r)
	var paths []string
	for _, m := range r.Matches {
		paths = append(paths, m.Path)
		if strings.Contains(m.Text, "hunter2") {
			t.Errorf("search revealed the denied file as %s: %q", m.Path, m.Text)
		}
	}
	if want := []string{"README.md", "sub/file.txt"}; !slices.Equal(paths, want) || r.FilesScanned != 2 {
		t.Errorf("matches in %q (%d files scanned), want %q", paths, r.FilesScanned, want)
	}
	b.ok(t, "search", map[string]any{"path": "dirlink", "pattern": "."}, &r)
	if len(r.Matches) != 1 || r.Matches[0].Path != "dirlink/file.txt" {
		t.Errorf("search of a link to an allowed directory = %+v", r.Matches)
	}
	for p, want := range map[string]string{
		"notes.md":   `path "notes.md" resolves to ".env"`,
		"a":          `resolves to ".env"`,
		"dirlink/up": `resolves to ".env"`,
		"d":          `resolves to ".git"`,
		".env":       `may not access path ".env"`,
	} {
		if msg := b.fails(t, "search", map[string]any{"path": p, "pattern": "."}, want); strings.Contains(msg, "hunter2") {
			t.Errorf("search %s revealed the denied file: %s", p, msg)
		}
	}
}

func TestPathPolicyAllowed(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"docs/a.md":     "a\n",
		"secret.txt":    "outside the allowed paths\n",
		"other/b.md":    "b\n",
		"docs/deep/c.x": "c\n",
	})
	for link, target := range map[string]string{"docs/link.md": "../secret.txt", "docs/inner": "../other"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	b := setup(t, meshworker.Config{Root: root, AllowedPaths: []string{"docs/**"}})

	var r readResult
	b.ok(t, "read", map[string]any{"path": "docs/a.md"}, &r)
	b.fails(t, "read", map[string]any{"path": "docs/link.md"}, `path "docs/link.md" resolves to "secret.txt", which this worker may not access`)
	b.fails(t, "read", map[string]any{"path": "docs/inner/b.md"}, `resolves to "other/b.md"`)
	b.fails(t, "read", map[string]any{"path": "secret.txt"}, `may not access path "secret.txt"`)
	b.fails(t, "write", map[string]any{"path": "docs/inner/x", "content": "x"}, `resolves to "other/x"`)
	if _, err := os.Lstat(filepath.Join(root, "other", "x")); err == nil {
		t.Error("other/x was created")
	}
	var l listResult
	b.ok(t, "list", map[string]any{"path": "docs", "recursive": true}, &l)
	if got, want := l.paths(), []string{"docs/a.md", "docs/deep", "docs/deep/c.x"}; !slices.Equal(got, want) {
		t.Errorf("list docs = %q, want %q", got, want)
	}
}

func TestPathPolicyGit(t *testing.T) {
	t.Parallel()
	root := policyWorkspace(t)
	// A real repository in place of the fake .git, with .env committed
	// (before the worker's globs, as a checkout could bring it).
	if err := os.RemoveAll(filepath.Join(root, ".git")); err != nil {
		t.Fatal(err)
	}
	repo, err := git.PlainInit(root, false)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".env", "README.md"} {
		if _, err := wt.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	sig := &object.Signature{Name: "t", Email: "t@example.com", When: time.Now()}
	if _, err := wt.Commit("init", &git.CommitOptions{Author: sig}); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, root, map[string]string{".env": "API_KEY=hunter2-changed\n", "README.md": "# readme, changed\n"})
	b := setup(t, meshworker.Config{Root: root, DeniedPaths: policyGlobs})

	var diff gitDiffResult
	b.ok(t, "git_diff", map[string]any{}, &diff)
	if !strings.Contains(diff.Diff, "+# readme, changed") || strings.Contains(diff.Diff, "hunter2") || strings.Contains(diff.Diff, ".env") {
		t.Errorf("diff:\n%s", diff.Diff)
	}
	b.fails(t, "git_diff", map[string]any{"path": "notes.md"}, `path "notes.md" resolves to ".env"`)
	b.fails(t, "git_diff", map[string]any{"path": "d"}, `path "d" resolves to ".git"`)
	b.fails(t, "git_add", map[string]any{"paths": []string{"README.md", "d/config"}}, `path "d/config" resolves to ".git/config"`)
	b.fails(t, "git_add", map[string]any{"paths": []string{"a"}}, `path "a" resolves to ".env"`)
	var add gitAddResult
	b.ok(t, "git_add", map[string]any{"paths": []string{"README.md", "readme-link"}}, &add)
}

// Without globs nothing is resolved: the worker behaves as before, and a
// link reads what it points to (the gate's globs are then the only ones).
func TestPathPolicyOffWithoutGlobs(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{Root: policyWorkspace(t)})
	var r readResult
	b.ok(t, "read", map[string]any{"path": "notes.md"}, &r)
	if r.Content != envSecret+"\n" {
		t.Errorf("read notes.md = %q", r.Content)
	}
	var w writeResult
	b.ok(t, "write", map[string]any{"path": "d/hooks/x", "content": "x"}, &w)
	var l listResult
	b.ok(t, "list", map[string]any{}, &l)
	want := []string{".env", ".git", "README.md", "a", "b", "d", "dirlink", "loop1", "loop2", "notes.md", "readme-link", "sub", "via"}
	if got := l.paths(); !slices.Equal(got, want) {
		t.Errorf("list = %q, want %q", got, want)
	}
}

// errorText is a failed call's message, or "" for a success.
func errorText(res *mcp.CallToolResult) string {
	if !res.IsError {
		return ""
	}
	return text(res)
}

func decode(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		t.Fatalf("decoding %v: %v", res.StructuredContent, err)
	}
}

func TestPathPolicyInvalidGlob(t *testing.T) {
	t.Parallel()
	for _, cfg := range []meshworker.Config{
		{Root: t.TempDir(), DeniedPaths: []string{"**/.env", "["}},
		{Root: t.TempDir(), AllowedPaths: []string{"/abs/**"}},
	} {
		if _, err := meshworker.NewServer(cfg, nil); err == nil || !strings.Contains(err.Error(), "invalid glob") {
			t.Errorf("NewServer(%v, %v) = %v, want an invalid glob error", cfg.AllowedPaths, cfg.DeniedPaths, err)
		}
	}
}

// FuzzPolicyHidesDenied sends any path to the tools of a workspace with
// links into denied files and checks that none of their content comes back
// and nothing under .git changes.
func FuzzPolicyHidesDenied(f *testing.F) {
	root := policyWorkspace(f)
	b := setup(f, meshworker.Config{Root: root, DeniedPaths: policyGlobs})
	gitConfig := filepath.Join(root, ".git", "config")
	for _, p := range []string{
		"notes.md", "a", "via", "sub/up", "dirlink/up", "d/config", "d/hooks/x", "./d/../notes.md",
		"dirlink/../notes.md", "sub/up/", "loop1", ".ENV", "D/config", "", ".", "dirlink", "d",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		// Only content is checked: file names come from earlier inputs.
		var revealed []string
		res := b.call(t, "write", map[string]any{"path": p, "content": "fuzz"})
		revealed = append(revealed, errorText(res))
		res = b.call(t, "list", map[string]any{"path": p, "recursive": true})
		revealed = append(revealed, errorText(res))
		if res = b.call(t, "read", map[string]any{"path": p}); res.IsError {
			revealed = append(revealed, text(res))
		} else {
			var r readResult
			decode(t, res, &r)
			revealed = append(revealed, r.Content)
		}
		if res = b.call(t, "search", map[string]any{"path": p, "pattern": "."}); res.IsError {
			revealed = append(revealed, text(res))
		} else {
			var r searchResult
			decode(t, res, &r)
			for _, m := range r.Matches {
				revealed = append(revealed, m.Text)
			}
		}
		for _, s := range revealed {
			if strings.Contains(s, "hunter2") && !strings.Contains(p, "hunter2") {
				t.Errorf("%q revealed the denied file: %s", p, s)
			}
		}
		if got := readFile(t, gitConfig); got != "[core]\n" {
			t.Fatalf("%q: .git/config changed to %q", p, got)
		}
		entries, err := os.ReadDir(filepath.Join(root, ".git", "hooks"))
		if err != nil || len(entries) != 1 {
			t.Fatalf("%q: .git/hooks now holds %v (%v)", p, entries, err)
		}
	})
}

// Denied files are checked as opened, not as named: a hard link to .env
// under another name is refused, by read and by search.
func TestDeniedAsOpened(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{DeniedPaths: []string{"**/.env"}})
	writeFiles(t, b.root, map[string]string{".env": "SECRET=1\n"})
	if err := os.Link(filepath.Join(b.root, ".env"), filepath.Join(b.root, "hard_env")); err != nil {
		t.Fatal(err)
	}
	b.fails(t, "read", map[string]any{"path": "hard_env"}, "hard links")
	var sr searchResult
	b.ok(t, "search", map[string]any{"pattern": "SECRET"}, &sr)
	if len(sr.Matches) != 0 {
		t.Errorf("search found the denied file through its hard link: %+v", sr.Matches)
	}

	// The race (a name swapped for a link to .env between the check and
	// the open) is TestCheckOpenedSeesTheFileOpened's: a loop here hardly
	// ever hits the window.
}

// A name flipped between a plain file and a link to .env while it is read,
// as code in the worker could do: no read returns .env's content.
func TestDeniedUnderASymlinkFlip(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{DeniedPaths: []string{"**/.env"}})
	writeFiles(t, b.root, map[string]string{".env": "SECRET=1\n", "race/file": "plain\n"})
	target := filepath.Join(b.root, "race", "file")
	stop := make(chan struct{})
	flipped := make(chan int)
	go func() {
		n := 0
		defer func() { flipped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Each form is made beside the name and renamed over it, so the
			// name always exists, as one or the other.
			tmp := target + ".tmp"
			if n%2 == 0 {
				_ = os.Symlink("../.env", tmp)
			} else {
				_ = os.WriteFile(tmp, []byte("plain\n"), 0o644)
			}
			_ = os.Rename(tmp, target)
			n++
		}
	}()
	reads, plain := 10_000, 0
	if testing.Short() {
		reads = 1000
	}
	for range reads {
		res := b.call(t, "read", map[string]any{"path": "race/file"})
		if strings.Contains(text(res), "SECRET") || strings.Contains(fmt.Sprint(res.StructuredContent), "SECRET") {
			t.Fatal("a read returned the content of .env")
		}
		if !res.IsError {
			plain++
		}
	}
	close(stop)
	t.Logf("%d reads while the name flipped %d times: %d read the plain file, %d were refused, none read .env", reads, <-flipped, plain, reads-plain)
	if plain == 0 || plain == reads {
		t.Errorf("the flip did not show: %d of %d reads saw the plain file", plain, reads)
	}
}
