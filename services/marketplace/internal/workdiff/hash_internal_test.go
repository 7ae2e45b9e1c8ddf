package workdiff

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// hashFile reads every file into one scratch buffer: what it returns of a
// changed file is the file's own, not the buffer the next file is read
// into; an unchanged file returns nothing, an emptied one an empty content
// (nil would read as too large), and a file past the budget its hash alone.
func TestHashFileReusesItsBuffer(t *testing.T) {
	t.Parallel()
	hash := func(s string) plumbing.Hash { return plumbing.ComputeHash(plumbing.BlobObject, []byte(s)) }
	var scratch []byte
	read := func(s string, budget int64, want plumbing.Hash) ([]byte, plumbing.Hash) {
		t.Helper()
		h, content, err := hashFile(strings.NewReader(s), int64(len(s)), budget, want, &scratch)
		if err != nil {
			t.Fatal(err)
		}
		if h != hash(s) {
			t.Fatalf("hash of %q = %s, want %s", s, h, hash(s))
		}
		return content, h
	}

	first, _ := read("first", 100, plumbing.ZeroHash)
	second, _ := read("other", 100, plumbing.ZeroHash) // the same size: the same buffer
	if string(first) != "first" || string(second) != "other" {
		t.Errorf("changed files' contents: %q and %q, want \"first\" and \"other\"", first, second)
	}
	if same, _ := read("other", 100, hash("other")); same != nil {
		t.Errorf("an unchanged file returned %q", same)
	}
	if emptied, _ := read("", 100, hash("was here")); emptied == nil || len(emptied) != 0 {
		t.Errorf("an emptied file returned %#v, want an empty, non-nil content", emptied)
	}
	big := strings.Repeat("x", 3*copyChunk)
	if past, _ := read(big, 10, plumbing.ZeroHash); past != nil {
		t.Errorf("a file past the budget returned %d bytes", len(past))
	}
	if !bytes.Equal(first, []byte("first")) {
		t.Errorf("the first file's content changed to %q after more reads", first)
	}
}
