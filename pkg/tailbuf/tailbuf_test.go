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
	if !big.Cut() || b.Cut() != true {
		t.Error("Cut does not say that bytes were dropped")
	}
	if tailbuf.New(100).Cut() {
		t.Error("an empty buffer says it dropped bytes")
	}

	// Many small writes keep the array near twice Max, not everything
	// written, and still the last Max bytes.
	many := tailbuf.New(100)
	var all strings.Builder
	for i := range 10000 {
		line := strings.Repeat("y", i%7) + "\n"
		all.WriteString(line)
		_, _ = many.Write([]byte(line))
	}
	if got := many.String(); len(got) != 100 || !strings.HasSuffix(all.String(), got) {
		t.Errorf("after many writes kept %d bytes %q, want the last 100", len(got), got)
	}
}
