// Package pgtext makes untrusted text storable in Postgres, which refuses
// the NUL character in text and jsonb values: a value holding one fails
// its whole statement. Text that comes from clients, workers and agents'
// output (an audit row, a node's output) is scrubbed, so that no output can
// keep a record from being written.
package pgtext

import "strings"

// Scrub returns s with every NUL character replaced by U+FFFD, the
// replacement character.
func Scrub(s string) string {
	return strings.ReplaceAll(s, "\x00", "\uFFFD") // s itself when it holds none
}
