package meshworker_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

func TestList(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})
	// "a.txt" and "a-b" sort between "a" and "a/x": the order must be the
	// order of the full paths, not a depth-first walk.
	writeFiles(t, b.root, map[string]string{
		"a/x.go":     "package x",
		"a/y/z.go":   "package z",
		"a.txt":      "12345",
		"a-b":        "",
		"b.md":       "b",
		"sub/c.txt":  "c",
		"sub/d/e.md": "e",
	})
	if err := os.Symlink("sub", filepath.Join(b.root, "link")); err != nil {
		t.Fatal(err)
	}

	testListCases(t, b, []listCase{
		{
			name: "root, not recursive",
			args: map[string]any{},
			want: []string{"a", "a-b", "a.txt", "b.md", "link", "sub"},
		},
		{
			name: "recursive, sorted by full path, links not followed",
			args: map[string]any{"recursive": true},
			want: []string{"a", "a-b", "a.txt", "a/x.go", "a/y", "a/y/z.go", "b.md", "link", "sub", "sub/c.txt", "sub/d", "sub/d/e.md"},
		},
		{
			name: "subdirectory, recursive",
			args: map[string]any{"path": "sub", "recursive": true},
			want: []string{"sub/c.txt", "sub/d", "sub/d/e.md"},
		},
		{
			name: "a link to a directory inside the root, as the path",
			args: map[string]any{"path": "link"},
			want: []string{"link/c.txt", "link/d"},
		},
		{
			name:          "capped: the first entries in path order",
			args:          map[string]any{"recursive": true, "max_entries": 4},
			want:          []string{"a", "a-b", "a.txt", "a/x.go"},
			wantTruncated: true,
		},
		{
			name: "cap equal to the count is not truncated",
			args: map[string]any{"max_entries": 6},
			want: []string{"a", "a-b", "a.txt", "b.md", "link", "sub"},
		},
	})

	t.Run("types and sizes", func(t *testing.T) {
		t.Parallel()
		var r listResult
		b.ok(t, "list", map[string]any{}, &r)
		got := map[string]string{}
		for _, e := range r.Entries {
			got[e.Path] = e.Type
			if e.Path == "a.txt" && e.Size != 5 {
				t.Errorf("a.txt size = %d", e.Size)
			}
		}
		want := map[string]string{"a": "dir", "a-b": "file", "a.txt": "file", "b.md": "file", "link": "symlink", "sub": "dir"}
		for p, typ := range want {
			if got[p] != typ {
				t.Errorf("%s: type %q, want %q", p, got[p], typ)
			}
		}
	})
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		b.fails(t, "list", map[string]any{"path": "b.md"}, "not a directory")
		b.fails(t, "list", map[string]any{"path": "missing"}, "no such file")
		b.fails(t, "list", map[string]any{"path": "../"}, "escapes")
		b.fails(t, "list", map[string]any{"path": "/"}, "is absolute")
		b.fails(t, "list", map[string]any{"max_entries": -1}, "max_entries must not be negative")
	})
}

// listCase is one call of the list tool and the listing it must return.
type listCase struct {
	name          string
	args          map[string]any
	want          []string
	wantTruncated bool
}

// testListCases runs each case as a parallel subtest against b: list must
// return exactly the wanted paths, sorted by path, and say it was truncated
// only where the case says so.
func testListCases(t *testing.T, b *bundle, tests []listCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r listResult
			b.ok(t, "list", tt.args, &r)
			if got := r.paths(); !slices.Equal(got, tt.want) {
				t.Errorf("paths = %q, want %q", got, tt.want)
			}
			if !slices.IsSorted(r.paths()) {
				t.Errorf("not sorted: %q", r.paths())
			}
			if r.Truncated != tt.wantTruncated {
				t.Errorf("truncated = %v, want %v", r.Truncated, tt.wantTruncated)
			}
		})
	}
}
