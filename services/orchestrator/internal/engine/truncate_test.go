package engine

import (
	"testing"
	"unicode/utf8"
)

// A cut never splits a character: Postgres refuses text that is not UTF-8.
func TestTruncateKeepsUTF8(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"héllo", 10, "héllo"},
		{"héllo", 2, "h…"}, // é is two bytes: cut before it
		{"héllo", 3, "hé…"},
		{"日本語", 4, "日…"},
	} {
		got := truncate(c.s, c.n)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
