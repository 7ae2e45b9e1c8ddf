package httpapi

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/slowclient"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

// A workspace download is written under a deadline sized to it
// (slowclient), so a client that stops reading gives its export's place
// back; past the deadline nothing more is written.
func TestWorkspaceDownloadDeadline(t *testing.T) {
	t.Parallel()
	for _, size := range []int{10, 32 << 20} {
		now := time.Now()
		w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder(), now: func() time.Time { return now }}
		_ = WriteWorkspace(w)(engine.WorkspaceExport{RunID: "r", NodeID: "n", Format: "tar", Content: make([]byte, size)})
		if len(w.deadlines) != 1 {
			t.Fatalf("%d bytes: %d deadlines set, want 1", size, len(w.deadlines))
		}
		if d, want := w.deadlines[0].Sub(now), slowclient.Deadline(now, size).Sub(now); d < want || d > want+5*time.Second {
			t.Errorf("%d bytes: the deadline is %s away, want %s", size, d, want)
		}
		if w.Body.Len() != size {
			t.Errorf("%d bytes: %d written", size, w.Body.Len())
		}
	}
	now := time.Now()
	w := &deadlineWriter{ResponseRecorder: httptest.NewRecorder(), now: func() time.Time { return now.Add(slowclient.Grace + time.Second) }}
	_ = WriteWorkspace(w)(engine.WorkspaceExport{RunID: "r", NodeID: "n", Format: "tar", Content: []byte("slow")})
	if w.Body.Len() != 0 {
		t.Errorf("a download past its deadline wrote %d bytes", w.Body.Len())
	}
}
