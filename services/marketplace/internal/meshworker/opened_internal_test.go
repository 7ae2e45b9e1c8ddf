package meshworker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a read opened is checked, whatever name it was opened by: the file
// a link swapped in after the name's check is .env, and is refused.
func TestCheckOpenedSeesTheFileOpened(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("SECRET=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.md"), []byte("notes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy, err := newPathPolicy(nil, []string{"**/.env"})
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	w := &worker{realRoot: dir, root: root, policy: policy}
	for _, tt := range []struct {
		asked, opened, want string
	}{
		{"race/file", ".env", `path "race/file" opened ".env", which this worker may not access`},
		{"notes.md", "notes.md", ""},
	} {
		f, err := root.Open(tt.opened)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		err = w.checkOpened(tt.asked, f, fi)
		_ = f.Close()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s opening %s: %v, want %q", tt.asked, tt.opened, err, tt.want)
		}
	}
}
