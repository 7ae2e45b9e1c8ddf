package console

import (
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// timelineWidth is the width, in pixels, of a run's timeline: the run's
// whole span so far.
const timelineWidth = 600

// timeline is a run's attempts laid out in time, one row each, oldest
// first: which role ran when and for how long, retries and loop iterations
// included.
type timeline struct {
	Rows  []timelineRow
	Width int
}

type timelineRow struct {
	NodeID, Role       string
	Iteration, Attempt int
	Status, Error      string
	SessionID          string
	Task               string // what the attempt was asked
	CostUSD            float64
	StartedAt          time.Time
	Took               string
	// X and W place the attempt's bar on the timeline, in pixels.
	X, W int
}

// makeTimeline lays out v's attempts against the run's span: from its
// creation to its end, or now for a live run.
func makeTimeline(v api.RunView, now time.Time) timeline {
	end := now
	if v.FinishedAt != nil {
		end = *v.FinishedAt
	}
	roles := map[string]string{}
	for _, n := range v.Nodes {
		roles[n.ID] = n.Role
	}
	span := max(end.Sub(v.CreatedAt), time.Millisecond)
	at := func(t time.Time) int {
		return min(max(int(float64(timelineWidth)*float64(t.Sub(v.CreatedAt))/float64(span)), 0), timelineWidth)
	}
	tl := timeline{Width: timelineWidth}
	for _, a := range v.Attempts {
		stop := end
		if a.FinishedAt != nil {
			stop = *a.FinishedAt
		}
		x := min(at(a.StartedAt), timelineWidth-2) // a bar stays on the scale
		tl.Rows = append(tl.Rows, timelineRow{
			NodeID: a.NodeID, Role: roles[a.NodeID], Iteration: a.Iteration, Attempt: a.Attempt, Status: a.Status, Error: a.Error,
			SessionID: a.SessionID, Task: a.Task, CostUSD: a.CostUSD, StartedAt: a.StartedAt, Took: tookOf(stop.Sub(a.StartedAt)),
			X: x, W: max(at(stop)-x, 2),
		})
	}
	return tl
}

// tookOf is a duration as a person reads it: milliseconds under a second.
func tookOf(d time.Duration) string {
	d = max(d, 0) // clocks of two replicas may disagree a little
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
