// Package slowclient cuts off HTTP clients too slow to read a response:
// every write of a response gets a deadline of its own, a minute and a
// second for each MinRate bytes it writes.
//
// Meshwork's servers have no http.Server WriteTimeout, since a response
// lasts as long as its call (an agent's MCP call, a run's event stream).
// Without a deadline a client that stops reading would hold its handler,
// and all the handler holds (an exported workspace of up to 32 MiB, say),
// for as long as its connection stays open.
package slowclient

import (
	"net/http"
	"time"
)

// Grace is the time every write has, whatever its size.
const Grace = time.Minute

// MinRate is the slowest a client may read, in bytes a second, past Grace:
// 32 MiB in a little over three minutes.
const MinRate = 256 << 10

// Deadline is when a write of n bytes, starting now, must be done.
func Deadline(now time.Time, n int) time.Time {
	return now.Add(Grace + time.Duration(n/MinRate)*time.Second)
}

// Handler gives every write of next's responses its deadline.
func Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(Bound(w), r)
	})
}

// Bound returns w with a deadline set before each write. Where w cannot
// take deadlines (a test's recorder), it writes without.
func Bound(w http.ResponseWriter) http.ResponseWriter {
	return &writer{ResponseWriter: w, rc: http.NewResponseController(w)}
}

type writer struct {
	http.ResponseWriter
	rc *http.ResponseController
}

// Write sets the deadline, then writes: what it buffers is flushed under
// the same deadline (by a Flush through Unwrap, or at the response's end).
func (w *writer) Write(b []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(Deadline(time.Now(), len(b)))
	return w.ResponseWriter.Write(b)
}

// FlushError sends what was written, under the deadline of its write, and
// then clears the deadline: a handler idle between writes (a long MCP call
// between progress notifications) has none, as over HTTP/2, where a
// deadline ends the stream when it passes even with nothing to write.
func (w *writer) FlushError() error {
	err := w.rc.Flush()
	_ = w.rc.SetWriteDeadline(time.Time{})
	return err
}

// Unwrap lets http.ResponseController reach the connection (Flush,
// deadlines of its own).
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
