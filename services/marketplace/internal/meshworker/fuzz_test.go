package meshworker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

// FuzzPathsStayInRoot sends any path to the file tools of a workspace with
// a link out of it, and checks that nothing outside changed or leaked.
func FuzzPathsStayInRoot(f *testing.F) {
	parent := f.TempDir()
	root, outside := filepath.Join(parent, "root"), filepath.Join(parent, "outside")
	writeFiles(f, outside, map[string]string{"secret.txt": secret})
	writeFiles(f, root, map[string]string{"in.txt": "in"})
	if err := os.Symlink("../outside", filepath.Join(root, "out")); err != nil {
		f.Fatal(err)
	}
	b := setup(f, meshworker.Config{Root: root})
	for _, p := range []string{
		"../x", "/etc/passwd", "out/secret.txt", "out/../x", "a/../../x", "out/new",
		"./../x", "out", "", ".", "a\x00b", "in.txt/..", "out/./secret.txt", "..", "a/b/c/../../../../x",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		for tool, args := range map[string]map[string]any{
			"write":  {"path": p, "content": "fuzz"},
			"read":   {"path": p},
			"list":   {"path": p, "recursive": true},
			"search": {"path": p, "pattern": "SECRET"},
		} {
			res := b.call(t, tool, args)
			if strings.Contains(text(res), secret) && !strings.Contains(p, secret) {
				t.Errorf("%s %q revealed the outside file: %s", tool, p, text(res))
			}
		}
		if entries, err := os.ReadDir(parent); err != nil || len(entries) != 2 {
			t.Fatalf("%q: the parent of the root now holds %v (%v)", p, entries, err)
		}
		if entries, err := os.ReadDir(outside); err != nil || len(entries) != 1 {
			t.Fatalf("%q: the outside directory now holds %v (%v)", p, entries, err)
		}
		if got := readFile(t, filepath.Join(outside, "secret.txt")); got != secret {
			t.Fatalf("%q: the outside file changed", p)
		}
	})
}
