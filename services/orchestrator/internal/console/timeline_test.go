package console

import (
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Each attempt is a bar at its place in the run's span, a retry and a
// still-running attempt included, and never off the scale.
func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	at := func(s float64) *time.Time { v := t0.Add(time.Duration(s * float64(time.Second))); return &v }
	v := api.RunView{
		Run:   api.Run{CreatedAt: t0},
		Nodes: []api.NodeView{{ID: "plan", Role: "planner"}, {ID: "build", Role: "builder"}},
		Attempts: []store.Attempt{
			{NodeID: "plan", Iteration: 1, Attempt: 1, Status: "failed", StartedAt: *at(0), FinishedAt: at(1.5)},
			{NodeID: "plan", Iteration: 1, Attempt: 2, Status: "succeeded", StartedAt: *at(2), FinishedAt: at(4), CostUSD: 0.25},
			{NodeID: "build", Iteration: 1, Attempt: 1, Status: "running", StartedAt: *at(4.5)},
			{NodeID: "late", Iteration: 1, Attempt: 1, Status: "running", StartedAt: *at(20)}, // a clock ahead of now
		},
	}
	tl := makeTimeline(v, *at(6)) // a live run, 6 s in
	type bar struct {
		node, role, took string
		x, w             int
	}
	want := []bar{
		{"plan", "planner", "1.5s", 0, 150},
		{"plan", "planner", "2s", 200, 200},
		{"build", "builder", "1.5s", 450, 150},
		{"late", "", "0s", 598, 2},
	}
	if len(tl.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(tl.Rows), len(want))
	}
	for i, w := range want {
		r := tl.Rows[i]
		if got := (bar{r.NodeID, r.Role, r.Took, r.X, r.W}); got != w {
			t.Errorf("row %d: %+v, want %+v", i, got, w)
		}
	}
	if tl.Rows[1].CostUSD != 0.25 || tl.Rows[1].Attempt != 2 {
		t.Errorf("the retry: %+v", tl.Rows[1])
	}
}

// A loop's edge goes back from the node to the one it runs again, below
// the boxes, and the picture grows to hold it.
func TestLayoutDrawsLoopsBack(t *testing.T) {
	g := layout([]api.NodeView{
		{ID: "write", Type: "agent"},
		{ID: "review", Type: "agent", Needs: []string{"write"}},
		{ID: "revise", Type: "agent", Needs: []string{"review"}, Next: "write"},
		{ID: "ghost", Type: "agent", Next: "nowhere"},
	})
	if len(g.Loops) != 1 || g.Loops[0].Title != "revise goes back to write" {
		t.Fatalf("loops %+v, want revise's back to write", g.Loops)
	}
	// revise is in column 2, write in column 0: from revise's bottom middle
	// to write's, dipping below.
	want := "M 530 54 C 530 90, 90 90, 90 54"
	if g.Loops[0].D != want {
		t.Errorf("path %q, want %q", g.Loops[0].D, want)
	}
	if g.Height < 90+graphPadding {
		t.Errorf("height %d does not hold the loop", g.Height)
	}
}
