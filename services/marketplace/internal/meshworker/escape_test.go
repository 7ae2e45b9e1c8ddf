package meshworker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

// The gate refuses ".." and absolute paths before an action reaches a
// worker, but cannot see symbolic links inside the workspace. These tests
// call the tools directly, as if the gate were bypassed, and show that
// os.Root still keeps every tool inside the root.
const secret = "TOP-SECRET outside the workspace"

// escapeSetup makes a workspace whose links point outside it: to a file and
// a directory in another temporary directory, by absolute and by relative
// paths.
func escapeSetup(t *testing.T) (b *bundle, outside string) {
	t.Helper()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	outside = filepath.Join(parent, "outside")
	writeFiles(t, outside, map[string]string{"secret.txt": secret})
	writeFiles(t, root, map[string]string{"inside.txt": "inside"})
	for link, target := range map[string]string{
		"abs_file": filepath.Join(outside, "secret.txt"),
		"abs_dir":  outside,
		"rel_file": "../outside/secret.txt",
		"rel_dir":  "../outside",
		"sub/deep": "../../outside",
	} {
		p := filepath.Join(root, link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	return setup(t, meshworker.Config{Root: root, AllowExec: true}), outside
}

// checkOutside fails if anything outside the root changed.
func checkOutside(t *testing.T, outside string) {
	t.Helper()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "secret.txt" {
		t.Errorf("outside directory now holds %v", entries)
	}
	if got := readFile(t, filepath.Join(outside, "secret.txt")); got != secret {
		t.Errorf("outside file changed to %q", got)
	}
}

func TestSymlinkEscape(t *testing.T) {
	t.Parallel()
	b, outside := escapeSetup(t)
	through := []string{"abs_file", "rel_file", "abs_dir/secret.txt", "rel_dir/secret.txt", "sub/deep/secret.txt"}

	t.Run("read", func(t *testing.T) {
		for _, p := range through {
			msg := b.fails(t, "read", map[string]any{"path": p}, "")
			if strings.Contains(msg, secret) {
				t.Errorf("read %s revealed the outside file", p)
			}
		}
	})
	t.Run("write", func(t *testing.T) {
		for _, p := range append(through, "abs_dir/new.txt", "rel_dir/new.txt", "sub/deep/new/x.txt") {
			b.fails(t, "write", map[string]any{"path": p, "content": "pwned"}, "")
		}
		checkOutside(t, outside)
	})
	t.Run("list", func(t *testing.T) {
		for _, p := range []string{"abs_dir", "rel_dir", "sub/deep", "rel_dir/.."} {
			b.fails(t, "list", map[string]any{"path": p}, "")
		}
		var r listResult
		b.ok(t, "list", map[string]any{"recursive": true}, &r)
		for _, e := range r.Entries {
			if strings.Contains(e.Path, "secret") {
				t.Errorf("recursive list reached %s", e.Path)
			}
			if e.Path != "inside.txt" && e.Path != "sub" && e.Type != "symlink" {
				t.Errorf("%s listed as %s, want symlink", e.Path, e.Type)
			}
		}
		if len(r.Entries) != 7 {
			t.Errorf("entries = %q", r.paths())
		}
	})
	t.Run("search", func(t *testing.T) {
		var r searchResult
		b.ok(t, "search", map[string]any{"pattern": "SECRET"}, &r)
		if len(r.Matches) != 0 || r.FilesScanned != 1 {
			t.Errorf("search found %+v in %d files", r.Matches, r.FilesScanned)
		}
		for _, p := range through {
			b.fails(t, "search", map[string]any{"path": p, "pattern": "SECRET"}, "")
		}
	})
	t.Run("delete", func(t *testing.T) {
		for _, p := range []string{"abs_dir/secret.txt", "rel_dir/secret.txt", "sub/deep/secret.txt"} {
			b.fails(t, "delete", map[string]any{"path": p}, "")
		}
		checkOutside(t, outside)
		// Deleting a link removes the link, never what it points to.
		var d deleteResult
		b.ok(t, "delete", map[string]any{"path": "abs_dir", "recursive": true}, &d)
		b.ok(t, "delete", map[string]any{"path": "rel_file"}, &d)
		checkOutside(t, outside)
	})
	// exec runs in the root but is not confined to it (the container is):
	// only its working directory is checked here.
	t.Run("exec working directory", func(t *testing.T) {
		var r execResult
		b.ok(t, "exec", map[string]any{"command": []string{"pwd", "-P"}}, &r)
		want, err := filepath.EvalSymlinks(b.root)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(r.Stdout) != want {
			t.Errorf("pwd = %q, want %q", r.Stdout, want)
		}
	})
	checkOutside(t, outside)
}
