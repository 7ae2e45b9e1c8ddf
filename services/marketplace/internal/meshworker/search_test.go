package meshworker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
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
		b.fails(t, "search", map[string]any{"pattern": `x`, "max_matches": -1}, "max_matches must not be negative")
	})
}

// A search is bounded: a pattern over the size limit is refused, a line too
// long for the pattern's cost is skipped and counted, and the time limit
// stops the search with what it found, flagged.
func TestSearchBounds(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{MaxFileSize: 4 << 20})
	alternation := "(" + strings.Repeat("abcdefg|", 127) + "zz)" // 1,020 bytes
	writeFiles(t, b.root, map[string]string{
		"huge.txt":  "zz " + strings.Repeat("q", 3<<20) + "\nzz on a short line\n",
		"small.txt": "zz\n",
	})
	b.fails(t, "search", map[string]any{"pattern": strings.Repeat("a", meshworker.MaxPatternBytes+1)}, "the limit is 1024")

	var r searchResult
	b.ok(t, "search", map[string]any{"pattern": alternation}, &r)
	if r.LinesSkipped != 1 || len(r.Matches) != 2 || r.TimedOut {
		t.Errorf("the 3 MiB line with a 1 KiB pattern: skipped %d, matches %+v, timed out %v", r.LinesSkipped, r.Matches, r.TimedOut)
	}
	// A short pattern searches the long line.
	r = searchResult{}
	b.ok(t, "search", map[string]any{"pattern": "zz"}, &r)
	if r.LinesSkipped != 0 || len(r.Matches) != 3 {
		t.Errorf("a short pattern: skipped %d, matches %+v", r.LinesSkipped, r.Matches)
	}

	// A time limit too short for the workspace: partial, flagged, no error.
	slow := setup(t, meshworker.Config{MaxFileSize: 4 << 20, SearchTimeout: time.Nanosecond})
	files := map[string]string{}
	for i := range 200 {
		files[fmt.Sprintf("f%03d.txt", i)] = strings.Repeat("line\n", 200)
	}
	writeFiles(t, slow.root, files)
	r = searchResult{}
	slow.ok(t, "search", map[string]any{"pattern": "line"}, &r)
	if !r.TimedOut || r.FilesScanned == 200 {
		t.Errorf("past the time limit: timed out %v after %d files", r.TimedOut, r.FilesScanned)
	}
}
