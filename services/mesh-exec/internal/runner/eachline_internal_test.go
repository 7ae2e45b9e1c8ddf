package runner

import (
	"slices"
	"strings"
	"testing"
)

// eachLine gives the lines bufio.Scanner would (without their \n or \r\n,
// empty ones too, a last one without its end), and skips, and counts, the
// ones whose content is longer than max.
func TestEachLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    []string
		skipped int
	}{
		{"a\n\nb\r\nc", []string{"a", "", "b", "c"}, 0},
		{"12345678\n12345678\r\n12345678", []string{"12345678", "12345678", "12345678"}, 0},
		{"123456789\nok\n123456789\r\nok\n123456789", []string{"ok", "ok"}, 3},
		{strings.Repeat("x", 200_000) + "\nafter\n", []string{"after"}, 1},
		{"", nil, 0},
	} {
		var got []string
		skipped := eachLine(strings.NewReader(tc.in), 8, func(b []byte) { got = append(got, string(b)) })
		if !slices.Equal(got, tc.want) || skipped != tc.skipped {
			t.Errorf("eachLine(%.20q): %q, %d skipped; want %q, %d", tc.in, got, skipped, tc.want, tc.skipped)
		}
	}
}
