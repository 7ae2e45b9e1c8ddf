package meshworker_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

func TestSearch(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{MaxFileSize: 1000})
	writeFiles(t, b.root, map[string]string{
		"main.go":         "package main\n\nfunc main() {\n\tTODO()\n}\n",
		"docs/notes.md":   "nothing\r\nTODO: write docs\r\nTODO again",
		"docs/binary.bin": "TODO\x00TODO\n",
		"big.txt":         "TODO\n" + strings.Repeat("x", 1000),
		"long.txt":        "TODO " + strings.Repeat("é", 400),
		".git/config":     "TODO in git metadata",
	})

	var r searchResult
	b.ok(t, "search", map[string]any{"pattern": `TODO`}, &r)
	type match struct {
		path string
		line int
	}
	var got []match
	for _, m := range r.Matches {
		got = append(got, match{m.Path, m.Line})
	}
	want := []match{{"docs/notes.md", 2}, {"docs/notes.md", 3}, {"long.txt", 1}, {"main.go", 4}}
	if len(got) != len(want) {
		t.Fatalf("matches = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("match %d = %v, want %v", i, got[i], want[i])
		}
	}
	if r.Matches[0].Text != "TODO: write docs" {
		t.Errorf("CRLF line text = %q", r.Matches[0].Text)
	}
	if long := r.Matches[2].Text; len(long) > 500 || !utf8.ValidString(long) || !strings.HasPrefix(long, "TODO é") {
		t.Errorf("long line: %d bytes, valid UTF-8 %v", len(long), utf8.ValidString(long))
	}
	// main.go, notes.md and long.txt: not the binary, the oversized or .git.
	if r.FilesScanned != 3 || r.Truncated {
		t.Errorf("files_scanned = %d, truncated = %v", r.FilesScanned, r.Truncated)
	}

	t.Run("capped", func(t *testing.T) {
		t.Parallel()
		var r searchResult
		b.ok(t, "search", map[string]any{"pattern": `TODO`, "max_matches": 2}, &r)
		if len(r.Matches) != 2 || !r.Truncated {
			t.Errorf("%d matches, truncated %v; want 2, true", len(r.Matches), r.Truncated)
		}
	})
	t.Run("one file, regexp syntax", func(t *testing.T) {
		t.Parallel()
		var r searchResult
		b.ok(t, "search", map[string]any{"path": "main.go", "pattern": `^func \w+\(\)`}, &r)
		if len(r.Matches) != 1 || r.Matches[0].Line != 3 || r.Matches[0].Path != "main.go" {
			t.Errorf("matches = %+v", r.Matches)
		}
	})
	t.Run("no match", func(t *testing.T) {
		t.Parallel()
		var r searchResult
		b.ok(t, "search", map[string]any{"path": "docs", "pattern": `absent`}, &r)
		if len(r.Matches) != 0 || r.FilesScanned != 1 {
			t.Errorf("matches = %+v, scanned %d", r.Matches, r.FilesScanned)
		}
	})
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		b.fails(t, "search", map[string]any{"pattern": `(unclosed`}, "invalid pattern")
		b.fails(t, "search", map[string]any{"pattern": `a{2,1}`}, "invalid pattern")
		b.fails(t, "search", map[string]any{"pattern": ``}, "pattern is required")
		b.fails(t, "search", map[string]any{"path": "../", "pattern": `x`}, "escapes")
		b.fails(t, "search", map[string]any{"path": "missing", "pattern": `x`}, "no such file")
	})
}
