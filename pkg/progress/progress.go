// Package progress keeps MCP progress notifications in step with the
// result of their call.
//
// The MCP SDK hands a client the result of a call as soon as it arrives,
// while the notifications that came before it may still be waiting for
// their handler, so a client that stops listening when the call returns
// can lose the last events. A server that reports progress therefore puts
// the number it sent in its result's _meta (SentMetaKey, [Sent]); a client
// counts what it handled ([Tally]) and, when the call returns, waits until
// it has handled that many ([Tally.Wait]).
package progress

import (
	"sync"
	"time"
)

// SentMetaKey is the _meta key of a tool result that says how many progress
// notifications the server sent for the call.
const SentMetaKey = "meshwork/progress_sent"

// Sent reads the count a result's _meta carries; ok is false without one.
func Sent(meta map[string]any) (n int, ok bool) {
	switch v := meta[SentMetaKey].(type) {
	case float64: // decoded JSON
		return int(v), v >= 0
	case int:
		return v, v >= 0
	}
	return 0, false
}

// Tally counts the notifications a client handled for one call. The zero
// value is ready to use.
type Tally struct {
	mu      sync.Mutex
	handled int
	changed chan struct{}
}

// Handled records one more handled notification.
func (t *Tally) Handled() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handled++
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// Count is how many were handled.
func (t *Tally) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handled
}

// Wait returns once n notifications were handled, or after timeout (a
// notification the server sent may have been lost on the way).
func (t *Tally) Wait(n int, timeout time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		if t.handled >= n {
			t.mu.Unlock()
			return
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		ch := t.changed
		t.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return
		}
	}
}
