// Package textcut bounds text that Meshwork stores, sends or records but
// does not control the length of: agents' output, commands, error messages.
// A cut never splits a UTF-8 character, so the result stays text that
// Postgres, JSON and span attributes take.
package textcut

import (
	"strings"
	"unicode/utf8"
)

// Clip returns s cut to at most max bytes at the start of a character,
// followed by mark when it cut anything (the mark is not counted in max).
func Clip(s string, max int, mark string) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// Valid returns s as valid UTF-8 (each invalid byte sequence replaced by
// U+FFFD), cut to at most max bytes: for text that may not be UTF-8 at all,
// an agent's or a client's.
func Valid(s string, max int) string {
	return Clip(strings.ToValidUTF8(s, "\uFFFD"), max, "")
}
