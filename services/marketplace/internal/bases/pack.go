package bases

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // a packfile's trailer is its SHA-1, by git's format
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// draftStorage is a draft's object store: its objects are in memory, and a
// packfile fetched into it waits on disk until checkPack has bounded what it
// inflates to. go-git hands a store that is a storer.PackfileWriter the pack
// as it arrives; into a plain memory store it would inflate every object as
// it arrives, and a few megabytes of compressed zeros are gigabytes
// inflated.
type draftStorage struct {
	*memory.Storage
	d *Draft
}

// go-git writes a fetch into a store that is a PackfileWriter; were the
// draft's store not one, every fetch would inflate into memory unchecked.
var _ storer.PackfileWriter = (*draftStorage)(nil)

// PackfileWriter takes a fetched packfile into a file in the draft's scratch
// directory; its Close checks the pack and stores its objects.
func (s *draftStorage) PackfileWriter() (io.WriteCloser, error) {
	f, err := os.CreateTemp(s.d.scratch, scratchPrefix+"pack-")
	if err != nil {
		return nil, fmt.Errorf("bases: a file for the fetched packfile: %w", err)
	}
	return &packWriter{f: f, d: s.d, sum: sha1.New(), max: s.d.limits.fetchBudget()}, nil //nolint:gosec // git's format
}

// scratchPrefix starts the names of what a draft keeps for a while in its
// scratch directory; Store.PruneDrafts removes what an interrupted process
// left in the store's.
const scratchPrefix = ".draft-"

// packWriter writes a fetched packfile to its file, hashing it as it comes
// so that Close knows a whole pack from a cut one without reading it again.
// It has no ReadFrom, so that every byte passes through Write's bound.
type packWriter struct {
	f        *os.File
	d        *Draft
	sum      hash.Hash // of every byte but the last 20 so far
	tail     []byte    // the last 20 bytes so far: the trailer, at the end
	n, max   int64
	overflow bool
}

// Write refuses a pack larger than any pack checkPack could take: a
// compressed object is never much larger than its content, which the fetch
// budget bounds.
func (w *packWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.max-w.n {
		w.overflow = true
		return 0, w.tooLarge()
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	w.tail = append(w.tail, p[:n]...)
	if k := len(w.tail) - sha1.Size; k > 0 {
		w.sum.Write(w.tail[:k])
		w.tail = append(w.tail[:0], w.tail[k:]...)
	}
	return n, err
}

func (w *packWriter) tooLarge() error {
	return refused("the fetched packfile passes %d bytes (twice the file limit)", w.max)
}

// Close stores the pack's objects in the draft, once the pack is whole and
// checkPack has taken it, and removes the file in every case. go-git calls
// it also after a fetch that failed or timed out: a cut pack fails the
// trailer's check at once, before anything is inflated.
func (w *packWriter) Close() (err error) {
	defer func() {
		if cerr := w.f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("bases: the fetched packfile: %w", cerr)
		}
		_ = os.Remove(w.f.Name())
	}()
	if w.overflow {
		return w.tooLarge()
	}
	if len(w.tail) < sha1.Size || !bytes.Equal(w.sum.Sum(nil), w.tail) {
		return errors.New("bases: the fetched packfile is incomplete (its checksum does not match)")
	}
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("bases: the fetched packfile: %w", err)
	}
	if err := checkPack(w.f, w.d.limits); err != nil {
		return err
	}
	if _, err := w.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("bases: the fetched packfile: %w", err)
	}
	// A seekable scanner: go-git then reads a delta's data again from the
	// file when it applies it, instead of keeping every delta in memory.
	p, err := packfile.NewParserWithStorage(packfile.NewScanner(w.f), w.d.mem)
	if err != nil {
		return fmt.Errorf("bases: the fetched packfile: %w", err)
	}
	if _, err := p.Parse(); err != nil {
		return fmt.Errorf("bases: the fetched packfile: %w", err)
	}
	return nil
}

// maxDeltaHeader is the most bytes a delta's header takes: its base's size
// and its result's, as two LEB128 numbers of at most 10 bytes each.
const maxDeltaHeader = 20

// objectOverhead is what each object of a pack is charged besides its
// content: go-git's parser and the memory store keep a few hundred bytes
// of bookkeeping an object, so a pack of millions of empty objects costs
// memory that their sizes do not show.
const objectOverhead = 1024

// fetchBudget is what the objects of one fetch may take in memory: twice
// the file limit, which leaves room for the history of a fetch deeper than
// one commit, and for trees and commits.
func (l Limits) fetchBudget() int64 { return 2 * min(l.MaxBytes, 1<<60) }

// checkPack reads every object of a packfile, inflating it into nothing,
// and refuses the pack before anything of it is stored: an object that
// inflates past the size its header declares, an object larger than the
// draft's file limit, or objects that would take more than the fetch
// budget in all, each charged objectOverhead besides its content. A delta
// counts as its data (which go-git holds while it applies it) plus the
// object it rebuilds, as large as its own header declares; go-git refuses
// a delta whose result is not that size.
func checkPack(r io.Reader, l Limits) error {
	s := packfile.NewScanner(r)
	_, count, err := s.Header()
	if err != nil {
		return fmt.Errorf("bases: the fetched packfile: %w", err)
	}
	l = l.withDefaults()
	budget := l.fetchBudget()
	tooMuch := func() error {
		return refused("the fetched objects take more than %d bytes (twice the file limit); the repository, or the history fetched, is too large", budget)
	}
	tooLarge := func(size int64) error {
		return refused("an object of the fetched packfile is %d bytes; the file limit is %d", size, l.MaxBytes)
	}
	if int64(count) > budget/objectOverhead {
		return tooMuch()
	}
	total := int64(count) * objectOverhead
	for range count {
		oh, err := s.NextObjectHeader()
		if err != nil {
			return fmt.Errorf("bases: the fetched packfile: %w", err)
		}
		if !oh.Type.IsDelta() && oh.Length > l.MaxBytes {
			return tooLarge(oh.Length)
		}
		if oh.Length > budget-total {
			return tooMuch()
		}
		w := &inflated{declared: oh.Length}
		_, _, err = s.NextObject(w)
		switch {
		case errors.Is(err, errInflatesPast), errors.Is(err, packfile.ErrInflatedSizeMismatch):
			return refused("an object of the fetched packfile inflates past the %d bytes its header declares", oh.Length)
		case err != nil:
			return fmt.Errorf("bases: the fetched packfile: %w", err)
		}
		size := oh.Length
		if oh.Type.IsDelta() {
			target, ok := deltaTarget(w.head)
			if !ok {
				return refused("a delta of the fetched packfile, at offset %d, has no valid header", oh.Offset)
			}
			size = target
			total += oh.Length
		}
		if size > l.MaxBytes {
			return tooLarge(size)
		}
		if size > budget-total {
			return tooMuch()
		}
		total += size
	}
	return nil
}

// errInflatesPast is an object's data longer than its header declares.
// go-git's scanner stops such an object itself (ErrInflatedSizeMismatch);
// inflated checks again, so that the bound does not rest on that alone.
var errInflatesPast = errors.New("object inflates past its declared size")

// inflated takes an object's inflated data, keeping its first bytes (a
// delta's header) and failing past its declared size.
type inflated struct {
	declared, n int64
	head        []byte
}

func (w *inflated) Write(p []byte) (int, error) {
	if int64(len(p)) > w.declared-w.n {
		return 0, errInflatesPast
	}
	if len(w.head) < maxDeltaHeader {
		w.head = append(w.head, p[:min(len(p), maxDeltaHeader-len(w.head))]...)
	}
	w.n += int64(len(p))
	return len(p), nil
}

// deltaTarget reads the size of the object a delta rebuilds from the
// delta's header: the base's size, then the target's, each a little-endian
// base-128 number.
func deltaTarget(head []byte) (int64, bool) {
	var sizes [2]uint64
	i := 0
	for k := range sizes {
		for shift := uint(0); ; shift += 7 {
			if i >= len(head) || shift > 63 {
				return 0, false
			}
			b := head[i]
			i++
			sizes[k] |= uint64(b&0x7f) << shift
			if b&0x80 == 0 {
				break
			}
		}
	}
	if sizes[1] > 1<<62 {
		return 0, false
	}
	return int64(sizes[1]), true
}
