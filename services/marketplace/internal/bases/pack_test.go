package bases

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/memory"
)

// deltaPack is a packfile of a blob and a second blob one byte longer,
// which the encoder stores as a delta on the first.
func deltaPack(t testing.TB, size int) []byte {
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
// declares, not at the few bytes of its own data. The encoder stores the
// larger blob whole and the other as a delta on it; counted at its data,
// the delta would let the pack pass twice a file limit of the larger one's
// size.
func TestCheckPackCountsDeltasAtTheirResult(t *testing.T) {
	const size = 64 << 10
	pack := deltaPack(t, size)
	deltas := 0
	sc := packfile.NewScanner(bytes.NewReader(pack))
	_, count, err := sc.Header()
	if err != nil {
		t.Fatal(err)
	}
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			t.Fatal(err)
		}
		if oh.Type.IsDelta() {
			deltas++
		}
		if _, _, err := sc.NextObject(io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	if count != 2 || deltas != 1 {
		t.Fatalf("the pack holds %d objects, %d of them deltas; want 2, 1", count, deltas)
	}
	// Both blobs and their bookkeeping: 2*1024 + 65,537 + 65,536, and the
	// delta's few bytes of data.
	if err := checkPack(bytes.NewReader(pack), Limits{MaxBytes: 67000}); err != nil {
		t.Fatalf("within the limits: %v", err)
	}
	err = checkPack(bytes.NewReader(pack), Limits{MaxBytes: size + 1})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "the fetched objects take more than 131074 bytes") {
		t.Fatalf("past twice the limit with the delta's result: %v", err)
	}
	err = checkPack(bytes.NewReader(pack), Limits{MaxBytes: size})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is 65537 bytes") {
		t.Fatalf("an object past the file limit: %v", err)
	}
}

// rawPack is a packfile of one blob object whose header declares size and
// whose data is content, trailer included.
func rawPack(size int, content []byte) []byte {
	var buf bytes.Buffer
	buf.WriteString("PACK")
	_ = binary.Write(&buf, binary.BigEndian, uint32(2))
	_ = binary.Write(&buf, binary.BigEndian, uint32(1))
	// Type 3 (blob) and the size's low four bits, then seven bits a byte.
	b := byte(3<<4) | byte(size&0x0f)
	for size >>= 4; size > 0; size >>= 7 {
		buf.WriteByte(b | 0x80)
		b = byte(size & 0x7f)
	}
	buf.WriteByte(b)
	zw := zlib.NewWriter(&buf)
	_, _ = zw.Write(content)
	_ = zw.Close()
	sum := sha1.Sum(buf.Bytes()) //nolint:gosec // git's format
	buf.Write(sum[:])
	return buf.Bytes()
}

// An object whose data inflates past the size its header declares is
// refused, as is a pack whose header counts more objects than the budget
// could hold.
func TestCheckPackRefusesWhatItsHeadersHide(t *testing.T) {
	if err := checkPack(bytes.NewReader(rawPack(11, []byte("hello world"))), Limits{}); err != nil {
		t.Fatalf("an honest object: %v", err)
	}
	err := checkPack(bytes.NewReader(rawPack(3, bytes.Repeat([]byte("x"), 1<<20))), Limits{})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "inflates past the 3 bytes its header declares") {
		t.Fatalf("an object that inflates past its header: %v", err)
	}
	many := append([]byte("PACK\x00\x00\x00\x02"), 0x7f, 0xff, 0xff, 0xff)
	err = checkPack(bytes.NewReader(many), Limits{MaxBytes: 1 << 20})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "take more than") {
		t.Fatalf("two billion objects: %v", err)
	}
}

// A fetched pack is stored only whole: a pack cut short fails its
// trailer's check, and one past the fetch budget is refused as it comes.
func TestPackWriter(t *testing.T) {
	pack := rawPack(11, []byte("hello world"))
	for _, tt := range []struct {
		name   string
		limits Limits
		data   []byte
		want   string
	}{
		{"whole", Limits{}, pack, ""},
		{"cut short", Limits{}, pack[:len(pack)-1], "incomplete"},
		{"past the budget", Limits{MaxBytes: 10}, pack, "passes 20 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			scratch := t.TempDir()
			d := newDraft(tt.limits, scratch)
			w, err := d.store.PackfileWriter()
			if err != nil {
				t.Fatal(err)
			}
			_, werr := io.Copy(w, bytes.NewReader(tt.data))
			err = errors.Join(werr, w.Close())
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			if n := len(allObjects(d.mem)); tt.want == "" && n != 1 || tt.want != "" && n != 0 {
				t.Errorf("%d objects stored", n)
			}
			if left, _ := os.ReadDir(scratch); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

func allObjects(m *memory.Storage) []plumbing.Hash {
	var hs []plumbing.Hash
	_ = m.ForEachObjectHash(func(h plumbing.Hash) error {
		hs = append(hs, h)
		return nil
	})
	return hs
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

// checkPack reads a host's packfile: whatever the bytes, it returns, and a
// pack it takes parses within the limits it checked.
func FuzzCheckPack(f *testing.F) {
	f.Add(rawPack(11, []byte("hello world")))
	f.Add(rawPack(3, []byte("hello world")))
	f.Add(deltaPack(f, 256))
	f.Add([]byte("PACK\x00\x00\x00\x02\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		limits := Limits{MaxBytes: 1 << 16}
		if err := checkPack(bytes.NewReader(data), limits); err != nil {
			return
		}
		m := memory.NewStorage()
		p, err := packfile.NewParserWithStorage(packfile.NewScanner(bytes.NewReader(data)), m)
		if err != nil {
			return
		}
		_, _ = p.Parse()
		var total int64
		for _, h := range allObjects(m) {
			if size, err := m.EncodedObjectSize(h); err == nil {
				total += size
			}
		}
		if total > limits.withDefaults().fetchBudget() {
			t.Fatalf("checkPack took a pack whose objects hold %d bytes", total)
		}
	})
}
