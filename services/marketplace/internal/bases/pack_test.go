package bases

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/memory"
)

// deltaPack is a packfile of a blob and a second blob one byte longer,
// which the encoder stores as a delta on the first.
func deltaPack(t *testing.T, size int) []byte {
	t.Helper()
	m := memory.NewStorage()
	a := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	var hs []plumbing.Hash
	for _, content := range [][]byte{a, append(append([]byte{}, a...), 'x')} {
		h, err := WriteBlob(m, content)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	var buf bytes.Buffer
	if _, err := packfile.NewEncoder(&buf, m, false).Encode(hs, 10); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A delta counts at the size of the object it rebuilds, which its header
// declares, not at the few bytes of its own data: the second blob passes a
// file limit of exactly the first one's size only as a delta's result.
func TestCheckPackCountsDeltasAtTheirResult(t *testing.T) {
	const size = 64 << 10
	pack := deltaPack(t, size)
	if len(pack) > size {
		t.Fatalf("the pack is %d bytes: the second blob was not stored as a delta", len(pack))
	}
	if err := checkPack(bytes.NewReader(pack), Limits{MaxBytes: size + 1024}); err != nil {
		t.Fatalf("within the limits: %v", err)
	}
	err := checkPack(bytes.NewReader(pack), Limits{MaxBytes: size})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is 65537 bytes") {
		t.Fatalf("the delta's result past the file limit: %v", err)
	}
	// Both blobs fit the file limit, not twice it together.
	err = checkPack(bytes.NewReader(pack), Limits{MaxBytes: size + size/2})
	if err != nil {
		t.Fatalf("together within twice the limit: %v", err)
	}
	err = checkPack(bytes.NewReader(pack), Limits{MaxBytes: size/2 + size/4})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("each past the limit: %v", err)
	}
}

func TestDeltaTarget(t *testing.T) {
	for _, tt := range []struct {
		head []byte
		want int64
		ok   bool
	}{
		{[]byte{0x05, 0x07}, 7, true},
		{[]byte{0x80, 0x01, 0x81, 0x01}, 129, true},
		{[]byte{0x05}, 0, false},
		{[]byte{0x05, 0x80}, 0, false},
		{bytes.Repeat([]byte{0xff}, maxDeltaHeader), 0, false},
		{append([]byte{0x01}, append(bytes.Repeat([]byte{0xff}, 9), 0x7f)...), 0, false},
	} {
		got, ok := deltaTarget(tt.head)
		if got != tt.want || ok != tt.ok {
			t.Errorf("deltaTarget(%x) = %d, %v; want %d, %v", tt.head, got, ok, tt.want, tt.ok)
		}
	}
}

// An object whose data inflates past the size its header declares is
// refused as it inflates.
func TestInflatedRefusesPastDeclared(t *testing.T) {
	w := &inflated{declared: 4}
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("de")); !errors.Is(err, errInflatesPast) {
		t.Fatalf("past the declared size: %v", err)
	}
	if string(w.head) != "abc" {
		t.Errorf("head %q", w.head)
	}
}
