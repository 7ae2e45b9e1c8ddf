package meshworker_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

func TestWriteThenRead(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})

	var w writeResult
	b.ok(t, "write", map[string]any{"path": "notes/deep/today.md", "content": "# Today\nhello\n"}, &w)
	if w.Path != "notes/deep/today.md" || w.Bytes != 14 {
		t.Errorf("write result = %+v", w)
	}
	var r readResult
	b.ok(t, "read", map[string]any{"path": "notes/deep/today.md"}, &r)
	if r.Content != "# Today\nhello\n" || r.Size != 14 || r.Path != "notes/deep/today.md" {
		t.Errorf("read result = %+v", r)
	}

	// Overwriting keeps the file's mode and leaves no temporary file.
	p := filepath.Join(b.root, "notes", "deep", "today.md")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	b.ok(t, "write", map[string]any{"path": "notes/deep/today.md", "content": ""}, &w)
	if got := readFile(t, p); got != "" {
		t.Errorf("after overwrite: %q", got)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after overwrite = %v, %v; want 0600", fi.Mode(), err)
	}
	entries, err := os.ReadDir(filepath.Dir(p))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want only today.md", entries, err)
	}
}

func TestFileToolErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{MaxFileSize: 10})
	writeFiles(t, b.root, map[string]string{
		"ten.txt":    "0123456789",
		"eleven.txt": "0123456789X",
		"dir/a.txt":  "a",
	})
	if err := syscall.Mkfifo(filepath.Join(b.root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"read missing", "read", map[string]any{"path": "nope.txt"}, "no such file"},
		{"read directory", "read", map[string]any{"path": "dir"}, "is a directory"},
		{"read FIFO does not block", "read", map[string]any{"path": "fifo"}, "not a regular file"},
		{"read over the limit", "read", map[string]any{"path": "eleven.txt"}, "file is larger than the limit of 10 bytes"},
		{"read absolute", "read", map[string]any{"path": "/etc/passwd"}, "is absolute"},
		{"read dotdot", "read", map[string]any{"path": "../x"}, "escapes"},
		{"read inner dotdot", "read", map[string]any{"path": "dir/../../x"}, "escapes"},
		{"read empty path", "read", map[string]any{"path": ""}, "path is required"},
		{"read no path", "read", map[string]any{}, "path"},
		{"read unknown argument", "read", map[string]any{"path": "ten.txt", "mode": "x"}, "mode"},
		{"write over the limit", "write", map[string]any{"path": "big.txt", "content": "0123456789X"}, "larger than the limit of 10 bytes"},
		{"write absolute", "write", map[string]any{"path": "/tmp/x", "content": "x"}, "is absolute"},
		{"write dotdot", "write", map[string]any{"path": "../x", "content": "x"}, "escapes"},
		{"write onto a directory", "write", map[string]any{"path": "dir", "content": "x"}, "is a directory"},
		{"write trailing slash", "write", map[string]any{"path": "new/", "content": "x"}, "names a directory"},
		{"write under a file", "write", map[string]any{"path": "ten.txt/x", "content": "x"}, "not a directory"},
		{"delete absolute", "delete", map[string]any{"path": "/tmp"}, "is absolute"},
		{"delete dotdot", "delete", map[string]any{"path": "../x"}, "escapes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b.fails(t, tt.tool, tt.args, tt.want)
		})
	}

	t.Run("read at the limit", func(t *testing.T) {
		t.Parallel()
		var r readResult
		b.ok(t, "read", map[string]any{"path": "ten.txt"}, &r)
		if r.Content != "0123456789" {
			t.Errorf("content = %q", r.Content)
		}
	})
	t.Run("nothing was written", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{"big.txt", "new", filepath.Join("..", "x")} {
			if _, err := os.Lstat(filepath.Join(b.root, p)); err == nil {
				t.Errorf("%s exists", p)
			}
		}
	})
}

func TestDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})
	writeFiles(t, b.root, map[string]string{
		"file.txt":      "x",
		"full/a.txt":    "a",
		"full/sub/b.md": "b",
		"target.txt":    "t",
	})
	if err := os.Mkdir(filepath.Join(b.root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target.txt", filepath.Join(b.root, "link")); err != nil {
		t.Fatal(err)
	}

	var d deleteResult
	b.ok(t, "delete", map[string]any{"path": "file.txt"}, &d)
	if !d.Deleted || d.Path != "file.txt" {
		t.Errorf("delete file = %+v", d)
	}
	b.ok(t, "delete", map[string]any{"path": "empty"}, &d)
	b.fails(t, "delete", map[string]any{"path": "full"}, "not empty; set recursive")
	b.ok(t, "delete", map[string]any{"path": "full/", "recursive": true}, &d)
	b.ok(t, "delete", map[string]any{"path": "link"}, &d)
	b.fails(t, "delete", map[string]any{"path": "file.txt"}, "no such file")
	for _, p := range []string{".", "", "./", "full/..", "x/../."} {
		b.fails(t, "delete", map[string]any{"path": p, "recursive": true}, "")
	}

	for _, p := range []string{"file.txt", "empty", "full", "link"} {
		if _, err := os.Lstat(filepath.Join(b.root, p)); err == nil {
			t.Errorf("%s still exists", p)
		}
	}
	if got := readFile(t, filepath.Join(b.root, "target.txt")); got != "t" {
		t.Errorf("deleting the link changed its target: %q", got)
	}
	if _, err := os.Stat(b.root); err != nil {
		t.Errorf("the root is gone: %v", err)
	}
}

func TestReadonly(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{Readonly: true})
	writeFiles(t, b.root, map[string]string{"a.txt": "keep"})

	b.fails(t, "write", map[string]any{"path": "a.txt", "content": "changed"}, "read-only")
	b.fails(t, "write", map[string]any{"path": "new.txt", "content": "x"}, "read-only")
	b.fails(t, "delete", map[string]any{"path": "a.txt"}, "read-only")
	b.fails(t, "git_add", map[string]any{"paths": []string{"a.txt"}}, "read-only")
	b.fails(t, "git_commit", map[string]any{"message": "m"}, "read-only")

	var r readResult
	b.ok(t, "read", map[string]any{"path": "a.txt"}, &r)
	if r.Content != "keep" {
		t.Errorf("content = %q", r.Content)
	}
	if _, err := os.Stat(filepath.Join(b.root, "new.txt")); err == nil {
		t.Error("new.txt was created")
	}
}

func TestRefusalsAreToolErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})
	// Every tool's own refusal is a result with isError, never a protocol
	// error: call with arguments each tool rejects.
	calls := map[string]map[string]any{
		"read":       {"path": "/abs"},
		"write":      {"path": "/abs", "content": ""},
		"list":       {"path": "/abs"},
		"search":     {"path": "/abs", "pattern": "x"},
		"delete":     {"path": "/abs"},
		"exec":       {"command": []string{"true"}},
		"git_status": {},
		"git_diff":   {},
		"git_log":    {},
		"git_add":    {"paths": []string{"x"}},
		"git_commit": {"message": "m"},
	}
	for tool, args := range calls {
		res := b.call(t, tool, args)
		if !res.IsError || strings.TrimSpace(text(res)) == "" {
			t.Errorf("%s: IsError=%v message %q", tool, res.IsError, text(res))
		}
	}
}
