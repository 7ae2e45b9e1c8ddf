package docker

import (
	"bytes"
	"fmt"
	"testing"
)

// Logs keep the last bytes of a worker's output, from a line's start: a
// worker that logged more than the bound costs its reader the bound.
func TestTailWriter(t *testing.T) {
	t.Parallel()
	w := tailWriter{max: 100}
	var all bytes.Buffer
	for i := range 1000 {
		line := fmt.Sprintf("line %d\n", i)
		all.WriteString(line)
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	got := w.Bytes()
	if len(got) > 100 || !bytes.HasSuffix(all.Bytes(), got) || !bytes.HasPrefix(got, []byte("line ")) || len(w.buf) > 200 {
		t.Errorf("kept %q (%d bytes held), want the last whole lines of at most 100 bytes", got, len(w.buf))
	}
	short := tailWriter{max: 100}
	_, _ = short.Write([]byte("a\nb\n"))
	if string(short.Bytes()) != "a\nb\n" {
		t.Errorf("a short log: %q, want it whole", short.Bytes())
	}
}
