package engine

import (
	"context"
	"errors"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Event is one thing that happened in a run, for watchers (SSE, meshctl):
// the API's event.
type Event = api.Event

// agentLookback is how far below the highest agent event id seen Watch
// looks again for events committed late.
const agentLookback = 200

// WatchInterval is how often Watch looks for news. Checkpoints are in
// Postgres, written by whichever replica works the run, so a watcher polls
// the database rather than listening to one replica.
const WatchInterval = 200 * time.Millisecond

// Watch calls emit with the run's events, from its checkpoints after
// afterSeq (-1 for all) on, until the run ends or waits for an approval
// (then a "run" event is the last), ctx ends, or emit fails.
func (e *Engine) Watch(ctx context.Context, runID string, afterSeq int, emit func(Event) error) error {
	if _, err := e.loadVisible(ctx, runID); err != nil {
		return err
	}
	// Attempts that ended with or before checkpoint afterSeq were seen
	// with it: a watcher resuming after it must not get them again.
	var seenUntil time.Time
	if afterSeq >= 0 {
		at, err := store.CheckpointCreatedAt(ctx, e.pool, runID, afterSeq)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		seenUntil = at
	}
	var lastAttempt, lastAgent int64
	sentAgent := map[int64]bool{}
	tick := time.NewTicker(WatchInterval)
	defer tick.Stop()
	for {
		run, err := store.GetRun(ctx, e.pool, runID)
		if err != nil {
			return err
		}
		cps, err := store.ListCheckpointsAfter(ctx, e.pool, runID, afterSeq)
		if err != nil {
			return err
		}
		attempts, err := store.ListAttemptsAfter(ctx, e.pool, runID, lastAttempt)
		if err != nil {
			return err
		}
		for i := range attempts {
			a := attempts[i]
			lastAttempt = a.ID
			if a.FinishedAt != nil && !a.FinishedAt.After(seenUntil) {
				continue
			}
			if err := emit(Event{Type: "attempt", RunID: runID, NodeID: a.NodeID, Attempt: &a, At: a.StartedAt}); err != nil {
				return err
			}
		}
		// Nodes running at once insert their events concurrently, so an id
		// can commit after a higher one was read: look back a little and
		// skip what was sent.
		agents, err := store.ListAgentEventsAfter(ctx, e.pool, runID, max(lastAgent-agentLookback, 0))
		if err != nil {
			return err
		}
		for id := range sentAgent {
			if id <= lastAgent-agentLookback {
				delete(sentAgent, id)
			}
		}
		for i := range agents {
			ev := agents[i]
			if sentAgent[ev.ID] {
				continue
			}
			sentAgent[ev.ID] = true
			lastAgent = max(lastAgent, ev.ID)
			if !ev.At.After(seenUntil) {
				continue
			}
			if err := emit(Event{Type: "agent", RunID: runID, NodeID: ev.NodeID, Agent: &ev, At: ev.At}); err != nil {
				return err
			}
		}
		for _, c := range cps {
			afterSeq = c.Seq
			if err := emit(Event{Type: "checkpoint", RunID: runID, Seq: c.Seq, NodeID: c.NodeID, Nodes: c.Delta.Nodes, At: c.CreatedAt}); err != nil {
				return err
			}
		}
		if run.Status != runstate.RunRunning && afterSeq >= run.HeadSeq {
			return emit(Event{Type: "run", RunID: runID, Seq: run.HeadSeq, Status: run.Status, Error: run.Error, At: run.UpdatedAt})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
