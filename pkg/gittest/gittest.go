// Package gittest makes git repositories for tests with the real git
// program, and holds the coding loop's fixture: a Go module whose test fails,
// with a script for the fake claude that fixes it on its second try.
//
// It is for tests only; nothing in a service imports it.
package gittest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Run runs git in dir with a fixed identity and no user or system
// configuration, fails the test on an error, and returns the output.
func Run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Repo makes a repository at dir (created) on branch main holding files
// (path: content), committed, and returns dir.
func Repo(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, filepath.Dir(dir), "init", "-q", "-b", "main", dir)
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Run(t, dir, "add", "-A")
	Run(t, dir, "commit", "-q", "-m", "first")
	return dir
}

// Head is the commit a repository's HEAD names.
func Head(t testing.TB, dir string) string {
	t.Helper()
	return strings.TrimSpace(Run(t, dir, "rev-parse", "HEAD"))
}

// The buggy module's Add, before and after the fix.
const (
	BuggyAdd = "func Add(a, b int) int { return a - b }"
	FixedAdd = "func Add(a, b int) int { return a + b }"
)

// BuggyModule is a Go module (go 1.19, so the Go of Debian's shell worker
// builds it) whose Add subtracts and whose test wants a sum, plus
// .fake-claude.json, the script the fake claude follows when it runs in the
// repository: its first implementation multiplies (the test still fails),
// its second turn takes note of the failure, and its third adds.
func BuggyModule(t testing.TB) map[string]string {
	t.Helper()
	edit := func(from, to string) map[string]any {
		return map[string]any{"edit": map[string]any{"file_path": "calc.go", "old_string": from, "new_string": to}}
	}
	script, err := json.Marshal(map[string]any{"turns": []any{
		map[string]any{"steps": []any{edit("a - b", "a * b")}, "reply": "Add multiplies now."},
		map[string]any{"reply": "The test wants a sum, not a product."},
		map[string]any{"steps": []any{edit("a * b", "a + b")}, "reply": "Add adds now."},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"go.mod":            "module example.com/calc\n\ngo 1.19\n",
		"calc.go":           "package calc\n\n// Add returns the sum of a and b.\n" + BuggyAdd + "\n",
		"calc_test.go":      "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif got := Add(2, 3); got != 5 {\n\t\tt.Fatalf(\"Add(2, 3) = %d, want 5\", got)\n\t}\n}\n",
		".fake-claude.json": string(script),
	}
}
