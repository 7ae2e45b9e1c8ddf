package unidiff

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// Two sides with no line in common leave the diff's search nothing to
// find; go-git's own bound on it is an hour. Text gives up the search
// after textTimeout and still counts every line as changed.
func TestTextOfUnrelatedSidesEnds(t *testing.T) {
	t.Parallel()
	const n = 100_000
	var src, dst strings.Builder
	for i := range n {
		fmt.Fprintf(&src, "old line %d\n", i)
		fmt.Fprintf(&dst, "new line %d\n", i)
	}
	f := NewFile("big.txt", filemode.Regular, [20]byte{})
	p := Text(f, f, []byte(src.String()), []byte(dst.String()))
	if p.Added != n || p.Deleted != n {
		t.Errorf("added %d, deleted %d lines; want %d each", p.Added, p.Deleted, n)
	}
}
