package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// The replica that creates a run works its first node at once, with no
// River job. If it stops in the middle of that node, the node gets a job
// (from the stopping replica, or from the run's inline_job once the lease
// is free), and another replica finishes the run with every node committed
// once.
func TestStoppedReplicaHandsTheFirstNodeOver(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	cat := loadTestCatalog(t)
	exA := &enginetest.InstantExecutor{Record: true}
	release := exA.Hold("one:") // until the call's context ends
	defer release()
	a := startEngineConfig(t, engine.Config{Pool: pool, Catalog: cat, Executors: map[pipeline.Via]executor.Executor{pipeline.ViaMesh: exA}, ReplicaID: "a"})
	run := start(t, a, "linear", map[string]any{"task": "x"})
	eventually(t, "replica a to work node one", func() bool { return len(exA.Calls()) == 1 })
	stopCtx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = a.Stop(stopCtx) // gives up: the node is held

	exB := &enginetest.InstantExecutor{Record: true}
	b := startEngine(t, pool, cat, map[pipeline.Via]executor.Executor{pipeline.ViaMesh: exB}, "b")
	v := waitStatus(t, b, run.ID, runstate.RunSucceeded)
	for _, node := range []string{"one", "two", "three"} {
		if n := commits(t, pool, run.ID, node); n != 1 {
			t.Errorf("node %s committed %d times, want once", node, n)
		}
	}
	var one *int
	for _, at := range v.Attempts {
		if at.NodeID == "one" {
			if at.Status != "succeeded" || at.JobID == 0 || at.Replica[:2] != "b-" {
				t.Errorf("node one's attempt: %s by %s with job %d; want succeeded by b, with a job", at.Status, at.Replica, at.JobID)
			}
			one = &at.Attempt
		}
	}
	if one == nil {
		t.Fatal("node one has no attempt")
	}
	if len(exB.Calls()) != 3 {
		t.Errorf("replica b made %d calls, want the three nodes'", len(exB.Calls()))
	}
}

// MaxWorkers bounds the nodes worked at once: those of runs the replica
// starts itself and those River hands out share it.
func TestMaxWorkersBoundsChainsAndJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	var inFlight, most atomic.Int32
	ex := &enginetest.InstantExecutor{Reply: func(req executor.Request) (string, error) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		return "ok", nil
	}}
	eng := startEngineConfig(t, engine.Config{Pool: pool, Catalog: loadTestCatalog(t), Executors: map[pipeline.Via]executor.Executor{pipeline.ViaMesh: ex}, MaxWorkers: 2})
	// Runs started at once: two get the slots, the others River jobs that
	// wait for one.
	var wg sync.WaitGroup
	ids := make([]string, 6)
	for i := range ids {
		wg.Go(func() { ids[i] = start(t, eng, "linear", map[string]any{"task": "x"}).ID })
	}
	wg.Wait()
	for _, id := range ids {
		waitStatus(t, eng, id, runstate.RunSucceeded)
	}
	if m := most.Load(); m != 2 {
		t.Errorf("at most %d nodes worked at once, want the bound, 2", m)
	}
}

// Branches of one run committed at once, on one replica sharing the run's
// lease: each commit is decided over the head it finds, a commit whose run
// moved on meanwhile takes the locked path, and every node is committed
// once.
func TestParallelBranchesCommitOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(req executor.Request) (string, error) {
		time.Sleep(time.Duration(len(req.NodeID)) * time.Millisecond) // the branches end close together
		return req.NodeID, nil
	})
	ids := make([]string, 4)
	for i := range ids {
		ids[i] = start(t, b.eng, "diamond", nil).ID
	}
	for _, id := range ids {
		v := waitStatus(t, b.eng, id, runstate.RunSucceeded)
		if got := v.Outputs["join"]; got != "join" {
			t.Errorf("run %s: join's output %q", id, got)
		}
		for _, node := range []string{"start", "left", "middle", "right", "join"} {
			if n := commits(t, b.pool, id, node); n != 1 {
				t.Errorf("run %s: node %s committed %d times, want once", id, node, n)
			}
		}
		rows, _ := b.pool.Query(context.Background(), `SELECT seq FROM checkpoints WHERE run_id = $1 ORDER BY seq`, id)
		heads, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil || len(heads) != 6 || heads[5] != 5 {
			t.Errorf("run %s: checkpoints %v (%v), want 0 to 5 in a chain", id, heads, err)
		}
	}
}
