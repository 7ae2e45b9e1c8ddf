package tailbuf_test

import (
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/tailbuf"
)

// A buffer keeps only its last Max bytes, and gives its last lines.
func TestBuffer(t *testing.T) {
	t.Parallel()
	b := tailbuf.New(10)
	for _, s := range []string{"one\n", "two\n", "three\n"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "two\nthree\n" {
		t.Errorf("kept %q, want the last 10 bytes", got)
	}
	for n, want := range map[int]string{0: "two\nthree\n", 1: "three\n", 2: "two\nthree\n", 5: "two\nthree\n"} {
		if got := string(b.Lines(n)); got != want {
			t.Errorf("Lines(%d) = %q, want %q", n, got, want)
		}
	}
	big := tailbuf.New(4)
	_, _ = big.Write([]byte(strings.Repeat("x", 1000) + "abcd"))
	if got := big.String(); got != "abcd" {
		t.Errorf("one large write kept %q", got)
	}
}
