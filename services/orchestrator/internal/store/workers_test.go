package store_test

import (
	"reflect"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// A settled run's workers are taken once; a worker that a running run holds
// too is left to that run (its row goes, the worker is not returned), and a
// running run's rows stay until it settles.
func TestTakeSettledWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := b.newRun(t, store.NewRun{Status: runstate.RunSucceeded})
	waiting := b.newRun(t, store.NewRun{Status: runstate.RunWaiting})
	running := b.newRun(t, store.NewRun{})
	record := func(run store.Run, via, id string) {
		t.Helper()
		for range 2 { // recording twice is recording once
			if err := store.RecordRunWorker(b.ctx, b.pool, run.ID, via, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	record(done, "marketplace", "writer-1")
	record(done, "marketplace", "shared-1")
	record(waiting, "marketplace", "writer-1") // two settled runs, one worker
	record(waiting, "mesh", "writer-1")        // another executor's worker of that id
	record(running, "marketplace", "shared-1")

	got, err := store.TakeSettledWorkers(b.ctx, b.pool, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SettledWorker{{Via: "marketplace", ID: "writer-1"}, {Via: "mesh", ID: "writer-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("taken %+v, want %+v", got, want)
	}
	if got, err := store.TakeSettledWorkers(b.ctx, b.pool, 100); err != nil || len(got) != 0 {
		t.Errorf("taken again: %+v, %v; want none", got, err)
	}

	// The running run settles: its worker is taken now.
	if err := store.UpdateRun(b.ctx, b.pool, running.ID, store.RunUpdate{Status: runstate.RunFailed}); err != nil {
		t.Fatal(err)
	}
	got, err = store.TakeSettledWorkers(b.ctx, b.pool, 100)
	if want := []store.SettledWorker{{Via: "marketplace", ID: "shared-1"}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after the run failed: %+v, %v; want %+v", got, err, want)
	}
}
