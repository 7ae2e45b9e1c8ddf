package textcut_test

import (
	"testing"
	"unicode/utf8"

	"github.com/meshwork/meshwork/pkg/textcut"
)

// A cut never splits a character: Postgres refuses text that is not UTF-8.
func TestClipKeepsUTF8(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s, mark string
		n       int
		want    string
	}{
		{"héllo", "…", 10, "héllo"},
		{"héllo", "…", 5, "héll…"}, // 6 bytes
		{"héllo", "…", 2, "h…"},    // é is two bytes: cut before it
		{"héllo", "…", 3, "hé…"},
		{"日本語", "…", 4, "日…"},
		{"日本語", "", 2, ""},
		{"abc", "[cut]", 0, "[cut]"},
	} {
		got := textcut.Clip(c.s, c.n, c.mark)
		if got != c.want || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d, %q) = %q, want %q", c.s, c.n, c.mark, got, c.want)
		}
	}
}

// Valid replaces what is not UTF-8 and then cuts within the bound.
func TestValid(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"ok", 10, "ok"},
		{"a\xffb", 10, "a\uFFFDb"},
		{"a\xffb", 3, "a"}, // U+FFFD is three bytes: it does not fit after a
		{"日本語", 7, "日本"},
	} {
		if got := textcut.Valid(c.s, c.n); got != c.want {
			t.Errorf("Valid(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
