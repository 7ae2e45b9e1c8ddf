// Package tailbuf keeps the end of a stream: the last bytes a process
// wrote (its stderr, its log), bounded however much it writes.
package tailbuf

import (
	"bytes"
	"sync"
)

// Buffer keeps the last Max bytes written to it. It is safe for concurrent
// use; the zero value keeps nothing.
type Buffer struct {
	Max int

	mu  sync.Mutex
	buf []byte
	cut bool
}

// New returns a Buffer of the last max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

// Write keeps p's end. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 2*b.Max {
		// Copy down rather than reslice, so the array stays near twice
		// Max instead of growing with everything ever written; once in
		// Max bytes written, not on every write.
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-b.Max:]...)
		b.cut = true
	}
	return len(p), nil
}

// kept is the last Max bytes written; b.mu is held.
func (b *Buffer) kept() []byte {
	if over := len(b.buf) - b.Max; over > 0 {
		return b.buf[over:]
	}
	return b.buf
}

// Cut reports whether anything written was dropped.
func (b *Buffer) Cut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cut || len(b.buf) > b.Max
}

// String returns what is kept.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.kept())
}

// Lines returns the last n lines kept (all of them if n <= 0); a trailing
// newline does not count as an empty line.
func (b *Buffer) Lines(n int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.kept()
	if n > 0 {
		end := len(out)
		if end > 0 && out[end-1] == '\n' {
			end--
		}
		for range n {
			j := bytes.LastIndexByte(out[:end], '\n')
			if j < 0 {
				end = -1
				break
			}
			end = j
		}
		if end >= 0 {
			out = out[end+1:]
		}
	}
	return bytes.Clone(out)
}
