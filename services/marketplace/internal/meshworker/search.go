package meshworker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"time"
	"unicode/utf8"
)

const (
	defaultMaxMatches = 200
	// MaxPatternBytes is the longest search pattern.
	MaxPatternBytes = 1024
	// DefaultSearchTimeout is Config.SearchTimeout's default.
	DefaultSearchTimeout = 10 * time.Second
	// searchBudget bounds one line's match, as the pattern's length times the
	// line's: RE2 is linear in each, but their product can take seconds (a
	// 1 KiB alternation over a 3 MiB line), and a match cannot be stopped
	// once it runs. A longer line is skipped and counted.
	searchBudget = 256 << 20
	// maxLineText caps the text of one match: a minified file is one line.
	maxLineText = 500
	// binarySniff is how much of a file is checked for a NUL byte: a file
	// with one there is binary, the heuristic git and grep use.
	binarySniff = 8 << 10
)

type searchIn struct {
	Path       string `json:"path,omitempty" jsonschema:"file or directory relative to the workspace root (default: the root)"`
	Pattern    string `json:"pattern" jsonschema:"Go (RE2) regular expression, matched against each line"`
	MaxMatches int    `json:"max_matches,omitempty" jsonschema:"the most matches returned (default 200)"`
}

type searchMatch struct {
	Path string `json:"path" jsonschema:"file path relative to the workspace root, slash-separated"`
	Line int    `json:"line" jsonschema:"line number, from 1"`
	Text string `json:"text" jsonschema:"the line, cut at 500 bytes"`
}

type searchOut struct {
	Matches      []searchMatch `json:"matches" jsonschema:"matches in path order, then line order"`
	Truncated    bool          `json:"truncated" jsonschema:"true when more matches exist than max_matches"`
	FilesScanned int           `json:"files_scanned" jsonschema:"text files searched (binary and oversized files are skipped)"`
	TimedOut     bool          `json:"timed_out,omitempty" jsonschema:"true when the search stopped at its time limit: the matches are those found before it"`
	LinesSkipped int           `json:"lines_skipped,omitempty" jsonschema:"lines too long to search with this pattern (the pattern's length times the line's passes the search's budget)"`
}

func (w *worker) search(ctx context.Context, in searchIn) (searchOut, error) {
	p, err := relPath(in.Path, true)
	if err != nil {
		return searchOut{}, err
	}
	if in.Pattern == "" {
		return searchOut{}, errors.New("pattern is required")
	}
	if len(in.Pattern) > MaxPatternBytes {
		return searchOut{}, fmt.Errorf("pattern is %d bytes; the limit is %d", len(in.Pattern), MaxPatternBytes)
	}
	re, err := regexp.Compile(in.Pattern)
	if err != nil {
		return searchOut{}, fmt.Errorf("invalid pattern: %w", err)
	}
	limit, err := countLimit("max_matches", in.MaxMatches, defaultMaxMatches)
	if err != nil {
		return searchOut{}, err
	}

	// Checked before anything is read: the walk leaves out what the worker
	// may not access, and a file it may not is never opened.
	resolved, err := w.guard("search", p, true)
	if err != nil {
		return searchOut{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.SearchTimeout)
	defer cancel()
	s := &searcher{ctx: ctx, w: w, re: re, limit: limit, maxLine: searchBudget / len(in.Pattern), out: searchOut{Matches: []searchMatch{}}}
	fi, err := w.root.Stat(p)
	if err != nil {
		return searchOut{}, fmt.Errorf("search %s: %w", p, err)
	}
	if !fi.IsDir() {
		err = s.file(p, display(p))
	} else {
		opts := walkOptions{recursive: true, skipDir: func(name string) bool { return name == ".git" }}
		err = w.walk(ctx, p, resolved, opts, func(open, disp string, d fs.DirEntry) error {
			if !d.Type().IsRegular() { // links are not followed, like list
				return nil
			}
			return s.file(open, disp)
		})
	}
	if errors.Is(err, errStopWalk) {
		err = nil
	}
	if ctx.Err() != nil {
		// The time limit: what was found so far, flagged.
		s.out.TimedOut, err = true, nil
	}
	if err != nil {
		return searchOut{}, fmt.Errorf("search %s: %w", p, err)
	}
	return s.out, nil
}

type searcher struct {
	ctx     context.Context //nolint:containedctx // one search's deadline, checked between lines
	w       *worker
	re      *regexp.Regexp
	limit   int
	maxLine int // the longest line matched with this pattern
	out     searchOut
}

// file searches one file; files that cannot be read as text under the size
// limit are skipped rather than failing the whole search.
func (s *searcher) file(open, disp string) error {
	data, err := s.w.readFile(open)
	if err != nil || bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
		return nil //nolint:nilerr // unreadable, too large or binary: skipped, as documented
	}
	s.out.FilesScanned++
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if n%64 == 0 && s.ctx.Err() != nil {
			return errStopWalk
		}
		if len(line) > s.maxLine {
			s.out.LinesSkipped++
			continue
		}
		if !s.re.Match(line) {
			continue
		}
		if len(s.out.Matches) == s.limit {
			s.out.Truncated = true
			return errStopWalk
		}
		s.out.Matches = append(s.out.Matches, searchMatch{Path: disp, Line: n, Text: string(capText(line))})
	}
	return nil
}

// capText cuts a line at maxLineText bytes, backing off to a rune boundary
// so the cut itself never makes invalid UTF-8.
func capText(b []byte) []byte {
	if len(b) <= maxLineText {
		return b
	}
	i := maxLineText
	for i > maxLineText-utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i--
	}
	return b[:i]
}
