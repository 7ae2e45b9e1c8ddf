package store_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// A settled run's workers are taken once, only those of the executors
// asked for; ReleaseWorker stops one unless a running run holds it; a run
// that is over records no worker.
func TestSettledWorkers(t *testing.T) {
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
	record(waiting, "marketplace", "writer-1")
	record(waiting, "marketplace", "shared-1")
	record(waiting, "mesh", "writer-1") // another executor's worker of that id
	record(running, "marketplace", "shared-1")
	if err := store.RecordRunWorker(b.ctx, b.pool, done.ID, "marketplace", "late-1"); !errors.Is(err, store.ErrRunSettled) {
		t.Errorf("recording a worker of a run that succeeded: %v, want ErrRunSettled", err)
	}

	settled := func() []store.SettledWorker {
		t.Helper()
		got, err := store.SettledWorkers(b.ctx, b.pool, []string{"marketplace"}, 100)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, func(a, b store.SettledWorker) int { return strings.Compare(a.ID, b.ID) }) // listed in random order
		return got
	}
	got := settled()
	want := []store.SettledWorker{{Via: "marketplace", ID: "shared-1"}, {Via: "marketplace", ID: "writer-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("taken %+v, want %+v", got, want)
	}
	// A stop that fails (the marketplace is down) keeps the worker's rows:
	// the next round stops it.
	failed := errors.New("marketplace down")
	if _, err := store.ReleaseWorker(b.ctx, b.pool, got[1], func() error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("a failed stop: %v", err)
	}
	if again := settled(); !reflect.DeepEqual(again, want) {
		t.Fatalf("after a failed stop: %+v; want %+v still", again, want)
	}
	// While one replica stops writer-1, another that listed it too passes
	// it by rather than waiting for that stop.
	inStop, endStop, released := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(released)
		_, _ = store.ReleaseWorker(b.ctx, b.pool, got[1], func() error {
			close(inStop)
			<-endStop
			return failed // so that it is still there for the rest of the test
		})
	}()
	<-inStop
	if called, err := store.ReleaseWorker(b.ctx, b.pool, got[1], func() error { t.Error("stopped during another stop"); return nil }); err != nil || called {
		t.Errorf("a second replica's release during a stop: %v, %v; want it passed by", called, err)
	}
	close(endStop)
	<-released
	var stopped []string
	for _, w := range got {
		if _, err := store.ReleaseWorker(b.ctx, b.pool, w, func() error { stopped = append(stopped, w.ID); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(stopped, []string{"writer-1"}) {
		t.Errorf("stopped %q; want writer-1 alone (shared-1 is the running run's)", stopped)
	}
	// Released once: another replica that listed it too leaves it alone.
	if again, err := store.ReleaseWorker(b.ctx, b.pool, got[1], func() error { t.Error("stopped twice"); return nil }); err != nil || again {
		t.Errorf("writer-1 released again: %v, %v", again, err)
	}
	if got, err := store.SettledWorkers(b.ctx, b.pool, []string{"marketplace"}, 100); err != nil || len(got) != 0 {
		t.Errorf("taken again: %+v, %v; want none", got, err)
	}
	if got, err := store.SettledWorkers(b.ctx, b.pool, []string{"mesh"}, 100); err != nil || len(got) != 1 {
		t.Errorf("the mesh executor's: %+v, %v; want its one worker", got, err)
	}

	// The running run settles: its worker is taken now.
	if err := store.UpdateRun(b.ctx, b.pool, running.ID, store.RunUpdate{Status: runstate.RunFailed}); err != nil {
		t.Fatal(err)
	}
	if got, want := settled(), []store.SettledWorker{{Via: "marketplace", ID: "shared-1"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after the run failed: %+v; want %+v", got, want)
	}
}

// A waiting run that runs again and records its worker while the worker's
// stop is under way waits for the stop; one that records it before the
// stop begins keeps it.
func TestReleaseWorkerAndRecordTakeTurns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{Status: runstate.RunWaiting})
	for _, id := range []string{"first-1", "second-1"} {
		if err := store.RecordRunWorker(b.ctx, b.pool, run.ID, "marketplace", id); err != nil {
			t.Fatal(err)
		}
	}
	taken, err := store.SettledWorkers(b.ctx, b.pool, []string{"marketplace"}, 100)
	if err != nil || len(taken) != 2 {
		t.Fatalf("taken %+v, %v", taken, err)
	}
	slices.SortFunc(taken, func(a, b store.SettledWorker) int { return strings.Compare(a.ID, b.ID) }) // listed in random order

	// While first-1 stops, the run is approved and records both workers
	// again: first-1's record waits for its stop; second-1's, recorded
	// before its stop begins, keeps it running.
	recorded := make(chan error, 1)
	_, err = store.ReleaseWorker(b.ctx, b.pool, taken[0], func() error {
		if err := store.UpdateRun(b.ctx, b.pool, run.ID, store.RunUpdate{Status: runstate.RunRunning}); err != nil {
			return err
		}
		if err := store.RecordRunWorker(b.ctx, b.pool, run.ID, "marketplace", "second-1"); err != nil {
			return err
		}
		go func() { recorded <- store.RecordRunWorker(b.ctx, b.pool, run.ID, "marketplace", "first-1") }()
		select {
		case err := <-recorded:
			t.Errorf("first-1 was recorded (%v) while its stop was under way", err)
			recorded <- err
		case <-time.After(300 * time.Millisecond):
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-recorded; err != nil {
		t.Fatalf("recording first-1 after its stop: %v", err)
	}
	stopped, err := store.ReleaseWorker(b.ctx, b.pool, taken[1], func() error { return nil })
	if err != nil || stopped {
		t.Errorf("second-1, recorded by the running run: stopped %v, %v; want it kept", stopped, err)
	}
}

// A node's result came from the nearest run back along the forks with a
// succeeded attempt of it; its thread is that run's.
func TestNodeThread(t *testing.T) {
	t.Parallel()
	b := setup(t)
	seq := 1
	a := b.newRun(t, store.NewRun{Thread: "thread-a"})
	fork := b.newRun(t, store.NewRun{Thread: "thread-b", ForkedFromRun: a.ID, ForkedFromSeq: &seq})
	again := b.newRun(t, store.NewRun{Thread: "thread-c", ForkedFromRun: fork.ID, ForkedFromSeq: &seq})
	attempt := func(run store.Run, node string, iteration int, status, journey string) {
		t.Helper()
		a := store.Attempt{RunID: run.ID, NodeID: node, Iteration: iteration, Attempt: 1, Replica: "A", Status: status, Journey: journey, StartedAt: time.Now()}
		if journey != "" {
			a.ChangeDigest = "digest-of-" + journey
		}
		if err := store.InsertAttempt(b.ctx, b.pool, a); err != nil {
			t.Fatal(err)
		}
	}
	attempt(a, "implement", 1, "succeeded", "implementer-1")
	attempt(a, "implement", 2, "succeeded", "implementer-2")
	attempt(fork, "implement", 3, "failed", "implementer-f") // a failure makes no result
	attempt(again, "review", 1, "succeeded", "reviewer-c")
	attempt(again, "approve", 1, "succeeded", "") // not a marketplace role
	for _, tt := range []struct {
		run                 store.Run
		node, want, journey string
		iteration           int
	}{
		{a, "implement", "thread-a", "implementer-2", 2},
		{a, "implement", "thread-a", "implementer-1", 1},     // an earlier iteration's
		{fork, "implement", "thread-a", "implementer-1", 1},  // it came with the fork's checkpoint, of iteration 1
		{again, "implement", "thread-a", "implementer-2", 2}, // two forks back
		{again, "review", "thread-c", "reviewer-c", 1},       // it ran in the fork itself
		{fork, "review", "thread-b", "", 1},                  // never ran: the run's own thread, no journey
		{again, "approve", "thread-c", "", 1},
		{fork, "implement", "thread-a", "", 3}, // the fork's third failed
	} {
		if got, err := store.NodeThread(b.ctx, b.pool, tt.run.ID, tt.node); err != nil || got != tt.want {
			t.Errorf("NodeThread(%s, %s) = %q, %v; want %q", tt.run.Thread, tt.node, got, err, tt.want)
		}
		journey, digest, err := store.NodeJourney(b.ctx, b.pool, tt.run.ID, tt.node, tt.iteration)
		if want := "digest-of-" + tt.journey; err != nil || journey != tt.journey || (journey != "" && digest != want) || (journey == "" && digest != "") {
			t.Errorf("NodeJourney(%s, %s, %d) = %q, %q, %v; want %q", tt.run.Thread, tt.node, tt.iteration, journey, digest, err, tt.journey)
		}
	}
	// The attempts show their journey.
	as, err := store.ListAttempts(b.ctx, b.pool, a.ID)
	if err != nil || len(as) != 2 || as[1].Journey != "implementer-2" {
		t.Errorf("ListAttempts: %+v, %v", as, err)
	}
}
