package slowclient_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/slowclient"
)

// deadlineRecorder is a ResponseWriter that records the write deadline in
// force at each write, and whether it was flushed.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	deadline time.Time
	at       []time.Time
	flushed  bool
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error { d.deadline = t; return nil }

func (d *deadlineRecorder) Write(b []byte) (int, error) {
	d.at = append(d.at, d.deadline)
	return d.ResponseRecorder.Write(b)
}

func (d *deadlineRecorder) Flush() { d.flushed = true }

// Each write gets its own deadline, sized to what it writes; a flush still
// reaches the writer underneath, and clears the deadline.
func TestEveryWriteHasItsDeadline(t *testing.T) {
	t.Parallel()
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	sizes := []int{1, 3 * slowclient.MinRate, 64 << 20}
	start := time.Now()
	slowclient.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, n := range sizes {
			if _, err := w.Write(make([]byte, n)); err != nil {
				t.Error(err)
			}
		}
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
	})).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if len(rec.at) != len(sizes) {
		t.Fatalf("%d writes reached the writer, want %d", len(rec.at), len(sizes))
	}
	for i, n := range sizes {
		lo, hi := slowclient.Deadline(start, n), slowclient.Deadline(time.Now(), n)
		if rec.at[i].Before(lo) || rec.at[i].After(hi) {
			t.Errorf("write %d of %d bytes: deadline %s after the start, want %s", i, n, rec.at[i].Sub(start), lo.Sub(start))
		}
	}
	if got, want := slowclient.Deadline(start, 32<<20).Sub(start), 3*time.Minute+8*time.Second; got != want {
		t.Errorf("a write of 32 MiB has %s, want %s", got, want)
	}
	if !rec.flushed {
		t.Error("the flush did not reach the writer underneath")
	}
	if !rec.deadline.IsZero() {
		t.Errorf("after the flush the deadline is %s, want none while the handler is idle", rec.deadline)
	}
}

// On a real server a deadline set through the wrapper reaches the
// connection (http.ResponseController finds it through Unwrap), so the
// wrapper's own deadlines do too.
func TestDeadlinesReachTheConnection(t *testing.T) {
	t.Parallel()
	errs := make(chan error, 1)
	srv := httptest.NewServer(slowclient.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		errs <- http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
	})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if err := <-errs; err != nil {
		t.Fatalf("setting a deadline through the wrapper: %v", err)
	}
}
