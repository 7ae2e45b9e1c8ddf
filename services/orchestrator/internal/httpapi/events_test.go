package httpapi

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/meshapi"
)

// deadlineWriter is a ResponseWriter that records the write deadlines set
// on it, and fails writes once one has passed.
type deadlineWriter struct {
	*httptest.ResponseRecorder
	deadlines []time.Time
	writes    int
	now       func() time.Time
}

func (d *deadlineWriter) SetWriteDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	d.writes++
	if len(d.deadlines) == 0 {
		return 0, errors.New("written without a deadline")
	}
	if dl := d.deadlines[len(d.deadlines)-1]; !d.now().Before(dl) {
		return 0, errors.New("i/o timeout")
	}
	return d.ResponseRecorder.Write(b)
}

func (d *deadlineWriter) FlushError() error { d.Flush(); return nil }

// Every write of an event stream gets a fresh deadline, so that a client
// that stops reading cannot hold its handler; after a failed write the
// stream writes nothing more.
func TestEventStreamWriteDeadline(t *testing.T) {
	t.Parallel()
	now := time.Now()
	w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder(), now: func() time.Time { return now }}
	s := &sseStream{w: w, rc: http.NewResponseController(w)}
	for i := range 3 {
		if err := s.comment("keepalive"); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if len(w.deadlines) != 3 {
		t.Fatalf("%d deadlines set for 3 writes", len(w.deadlines))
	}
	for i, dl := range w.deadlines {
		if d := dl.Sub(now); d < streamWriteTimeout-5*time.Second || d > streamWriteTimeout+5*time.Second {
			t.Errorf("deadline %d is %s away; want about %s after its write", i, d, streamWriteTimeout)
		}
	}
	// A client that stopped reading: the write blocks past its deadline.
	w.now = func() time.Time { return now.Add(time.Hour) }
	if err := s.comment("keepalive"); err == nil {
		t.Fatal("a write past its deadline succeeded")
	}
	writes := w.writes
	if err := s.comment("keepalive"); err == nil || w.writes != writes || s.failure() == nil {
		t.Errorf("after a failed write: %v, %d more writes; want the stream dead", err, w.writes-writes)
	}
}

// At most MaxEventStreams streams are served at once; one more is refused
// with a 503 that says to try again, and its slot frees when a stream ends.
func TestEventStreamLimit(t *testing.T) {
	t.Parallel()
	// An API-only engine: the run never moves past its start.
	b := setupAPIOnly(t, Config{MaxEventStreams: 1})
	run := b.startEcho(t)
	path := "/v1/runs/" + run.ID + "/events"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := b.get(ctx, t, path)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() {
		t.Fatalf("first stream: nothing read: %v", sc.Err())
	}

	r2, data := b.do(t, http.MethodGet, path, aliceToken, nil)
	e := wantError(t, r2, data, http.StatusServiceUnavailable, meshapi.CodeUnavailable)
	if !strings.Contains(e.Message, "1 event streams") || r2.Header.Get("Retry-After") == "" {
		t.Errorf("refusal %q, Retry-After %q", e.Message, r2.Header.Get("Retry-After"))
	}
	// Other requests are not limited.
	b.call(t, http.MethodGet, "/v1/runs/"+run.ID, nil, http.StatusOK, nil)

	cancel() // the first client leaves
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := b.get(context.Background(), t, path)
		status := resp.StatusCode
		resp.Body.Close()
		if status == http.StatusOK {
			break
		}
		if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("after the first stream ended: %d", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
