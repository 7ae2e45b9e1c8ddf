// Package textcut bounds text that Meshwork stores, sends or records but
// does not control the length of: agents' output, commands, error messages.
// A cut never splits a UTF-8 character, so the result stays text that
// Postgres, JSON and span attributes take.
package textcut

import "unicode/utf8"

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
