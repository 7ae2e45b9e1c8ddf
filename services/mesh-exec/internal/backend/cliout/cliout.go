// Package cliout holds what every backend's parser does with an agent CLI's
// output beyond its own format: the tail of stderr worth showing, distinct
// lists of tools and files, and token counts that cannot overflow.
package cliout

import (
	"regexp"
	"strings"
)

// Tokens turns a reported count into an int64, dropping nonsense (negative,
// fractional garbage, or beyond any real run) rather than overflowing a sum.
func Tokens(f float64) int64 {
	if f > 0 && f < 1e15 { // false for NaN too
		return int64(f)
	}
	return 0
}

// AppendDistinct appends s unless list already holds it, keeping first-use order.
func AppendDistinct(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// FirstNonEmpty returns the first of ss that is not blank.
func FirstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}

// ansi matches terminal escape sequences (colours), which CLIs print to
// stderr even when it is not a terminal.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// Tail is the last 4 KiB of s, trimmed, from a line start when there is
// one, and valid UTF-8: the end of an agent's output, where its last word
// is, in a size an error message can carry.
func Tail(s string) string {
	s = strings.TrimSpace(s)
	const maxBytes = 4 << 10
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.ToValidUTF8(s, "")
}

// StderrTail is the end of stderr worth showing: its last lines, at most
// 4 KiB, without colour codes, because the reason for a failure is printed
// last.
func StderrTail(stderr string) string {
	lines := strings.Split(Tail(ansi.ReplaceAllString(stderr, "")), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
