package store_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	ctx  context.Context //nolint:containedctx // the test's context, for the bundle's helpers
	pool *pgxpool.Pool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{ctx: context.Background(), pool: pgtest.Pool(t)}
}

// newRun inserts a run, by default running, of pipeline p on a thread of
// its own.
func (b *bundle) newRun(t *testing.T, n store.NewRun) store.Run {
	t.Helper()
	if n.ID == "" {
		n.ID = uuid.NewString()
	}
	if n.Pipeline == "" {
		n.Pipeline = "p"
	}
	if n.PipelineHash == "" {
		n.PipelineHash = "hash"
	}
	if n.Thread == "" {
		n.Thread = n.ID
	}
	if n.Status == "" {
		n.Status = runstate.RunRunning
	}
	r, err := store.InsertRun(b.ctx, b.pool, n)
	if err != nil {
		t.Fatalf("InsertRun: %v", err)
	}
	return r
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// expire ends a run's lease as if its TTL had passed.
func (b *bundle) expire(t *testing.T, runID string) {
	t.Helper()
	b.exec(t, `UPDATE runs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, runID)
}

func (b *bundle) leaseOwner(t *testing.T, runID string) (owner string, fence int64) {
	t.Helper()
	var o *string
	if err := b.pool.QueryRow(b.ctx, `SELECT lease_owner, fence FROM runs WHERE id = $1`, runID).Scan(&o, &fence); err != nil {
		t.Fatal(err)
	}
	if o != nil {
		owner = *o
	}
	return owner, fence
}

func (b *bundle) claim(t *testing.T, runID, owner string) (store.Lease, bool) {
	t.Helper()
	l, ok, err := store.ClaimLease(b.ctx, b.pool, runID, owner, time.Minute, "writer")
	if err != nil {
		t.Fatalf("ClaimLease(%s): %v", owner, err)
	}
	return l, ok
}

// lockForCommit runs LockRunForCommit in a transaction it rolls back.
func (b *bundle) lockForCommit(t *testing.T, runID, owner string, fence int64) (store.Run, error) {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	r, _, err := store.LockRunForCommit(b.ctx, tx, runID, owner, fence)
	return r, err
}

func TestLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{})

	a1, ok := b.claim(t, run.ID, "A")
	if !ok || a1.Fence < 1 || a1.Run.ID != run.ID || a1.Run.Status != runstate.RunRunning {
		t.Fatalf("A's claim: %+v, %v", a1, ok)
	}
	if live, err := store.LeaseLive(b.ctx, b.pool, run.ID); err != nil || !live {
		t.Errorf("LeaseLive after a claim = %v, %v", live, err)
	}
	if _, ok := b.claim(t, run.ID, "B"); ok {
		t.Fatal("B claimed a run whose lease A holds")
	}
	if owner, fence := b.leaseOwner(t, run.ID); owner != "A" || fence != a1.Fence {
		t.Errorf("a refused claim changed the lease: %s, %d", owner, fence)
	}
	// A renews: same fence.
	a2, ok := b.claim(t, run.ID, "A")
	if !ok || a2.Fence != a1.Fence {
		t.Errorf("A's renewal: fence %d (ok %v), want %d", a2.Fence, ok, a1.Fence)
	}

	// A's lease expires: B takes over with a higher fence.
	b.expire(t, run.ID)
	if live, err := store.LeaseLive(b.ctx, b.pool, run.ID); err != nil || live {
		t.Errorf("LeaseLive after expiry = %v, %v", live, err)
	}
	b1, ok := b.claim(t, run.ID, "B")
	if !ok || b1.Fence <= a1.Fence {
		t.Fatalf("B's claim after expiry: fence %d (ok %v), A had %d", b1.Fence, ok, a1.Fence)
	}

	// Only B's fence commits.
	if _, err := b.lockForCommit(t, run.ID, "A", a1.Fence); !errors.Is(err, store.ErrStaleLease) {
		t.Errorf("LockRunForCommit with A's old fence: %v, want ErrStaleLease", err)
	}
	if _, err := b.lockForCommit(t, run.ID, "A", b1.Fence); !errors.Is(err, store.ErrStaleLease) {
		t.Errorf("LockRunForCommit by A with B's fence: %v, want ErrStaleLease", err)
	}
	if _, err := b.lockForCommit(t, run.ID, "B", a1.Fence); !errors.Is(err, store.ErrStaleLease) {
		t.Errorf("LockRunForCommit by B with A's fence: %v, want ErrStaleLease", err)
	}
	if r, err := b.lockForCommit(t, run.ID, "B", b1.Fence); err != nil || r.ID != run.ID {
		t.Errorf("LockRunForCommit with B's fence: %+v, %v", r, err)
	}
	if _, err := b.lockForCommit(t, uuid.NewString(), "B", b1.Fence); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LockRunForCommit of a missing run: %v, want ErrNotFound", err)
	}

	// A's stale release does nothing.
	if err := store.ReleaseLease(b.ctx, b.pool, run.ID, "A", a1.Fence); err != nil {
		t.Fatal(err)
	}
	if owner, fence := b.leaseOwner(t, run.ID); owner != "B" || fence != b1.Fence {
		t.Errorf("after A's stale release: owner %q fence %d, want B %d", owner, fence, b1.Fence)
	}
	if _, ok := b.claim(t, run.ID, "A"); ok {
		t.Error("A claimed the run after its stale release")
	}
	// B's release frees it; A's next claim raises the fence again.
	if err := store.ReleaseLease(b.ctx, b.pool, run.ID, "B", b1.Fence); err != nil {
		t.Fatal(err)
	}
	if owner, _ := b.leaseOwner(t, run.ID); owner != "" {
		t.Errorf("after B's release the owner is %q", owner)
	}
	a3, ok := b.claim(t, run.ID, "A")
	if !ok || a3.Fence <= b1.Fence {
		t.Errorf("A's claim after the release: fence %d (ok %v), B had %d", a3.Fence, ok, b1.Fence)
	}
}

func TestClaimLeaseMissingRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{uuid.NewString(), "not-a-uuid", ""} {
		if _, ok, err := store.ClaimLease(b.ctx, b.pool, id, "A", time.Minute, "r"); ok || !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ClaimLease(%q) = %v, %v; want ErrNotFound", id, ok, err)
		}
	}
}

func TestRenewLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r1, r2, r3 := b.newRun(t, store.NewRun{}), b.newRun(t, store.NewRun{}), b.newRun(t, store.NewRun{})
	b.claim(t, r1.ID, "A")
	b.claim(t, r2.ID, "A")
	b.claim(t, r3.ID, "B")
	if err := store.UpdateRun(b.ctx, b.pool, r2.ID, store.RunUpdate{Status: runstate.RunCancelled}); err != nil {
		t.Fatal(err)
	}
	// Shorten r1's lease so the renewal is visible.
	b.exec(t, `UPDATE runs SET lease_expires_at = now() + interval '1 second' WHERE id = $1`, r1.ID)

	got, err := store.RenewLeases(b.ctx, b.pool, "A", []string{r1.ID, r2.ID, r3.ID, uuid.NewString()}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{r1.ID: runstate.RunRunning, r2.ID: runstate.RunCancelled}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RenewLeases = %v, want %v", got, want)
	}
	var extended bool
	if err := b.pool.QueryRow(b.ctx, `SELECT lease_expires_at > now() + interval '30 minutes' FROM runs WHERE id = $1`, r1.ID).Scan(&extended); err != nil || !extended {
		t.Errorf("r1's lease was not extended (%v)", err)
	}
	if owner, _ := b.leaseOwner(t, r3.ID); owner != "B" {
		t.Errorf("A's renewal took B's run: owner %q", owner)
	}
	if got, err := store.RenewLeases(b.ctx, b.pool, "C", []string{r1.ID}, time.Hour); err != nil || len(got) != 0 {
		t.Errorf("RenewLeases by a replica holding nothing = %v, %v", got, err)
	}
}

func TestUpdateRunRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{})
	l, _ := b.claim(t, run.ID, "A")
	if err := store.UpdateRun(b.ctx, b.pool, run.ID, store.RunUpdate{HeadSeq: 3, Status: runstate.RunSucceeded, Release: true}); err != nil {
		t.Fatal(err)
	}
	got, err := store.GetRun(b.ctx, b.pool, run.ID)
	if err != nil || got.HeadSeq != 3 || got.Status != runstate.RunSucceeded || got.FinishedAt == nil {
		t.Errorf("after UpdateRun: %+v, %v", got, err)
	}
	if owner, fence := b.leaseOwner(t, run.ID); owner != "" || fence != l.Fence {
		t.Errorf("after a releasing update: owner %q, fence %d (was %d)", owner, fence, l.Fence)
	}
}

func TestInsertCheckpointDuplicateResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{})
	ins := func(seq int, node string, iteration int) error {
		var parent *int
		if seq > 0 {
			p := seq - 1
			parent = &p
		}
		c := store.Checkpoint{
			RunID: run.ID, Seq: seq, NodeID: node, Iteration: iteration, ParentSeq: parent,
			Delta: api.State{Nodes: map[string]pipeline.NodeState{node: {Status: pipeline.StatusSucceeded, Iteration: iteration}}},
		}
		if parent != nil {
			c.ParentRun = run.ID
		}
		return store.InsertCheckpoint(b.ctx, b.pool, c)
	}
	if err := ins(0, "", 0); err != nil {
		t.Fatal(err)
	}
	if err := ins(1, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := ins(2, "a", 1); !errors.Is(err, store.ErrDuplicateResult) {
		t.Errorf("a second result for a, iteration 1: %v, want ErrDuplicateResult", err)
	}
	if err := ins(2, "a", 2); err != nil {
		t.Errorf("a's next iteration: %v", err)
	}
	// Checkpoints without a node are not results: no limit.
	if err := ins(3, "", 0); err != nil {
		t.Errorf("a second checkpoint without a node: %v", err)
	}
	// A taken seq is another error.
	if err := ins(3, "b", 1); err == nil || errors.Is(err, store.ErrDuplicateResult) {
		t.Errorf("a taken seq: %v, want a primary key violation", err)
	}
	// The same node and iteration in another run is fine.
	other := b.newRun(t, store.NewRun{})
	if err := store.InsertCheckpoint(b.ctx, b.pool, store.Checkpoint{RunID: other.ID, Seq: 0, NodeID: "a", Iteration: 1}); err != nil {
		t.Errorf("a's iteration 1 in another run: %v", err)
	}

	// Through a batch.
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	batch := &store.Batch{}
	for seq := 4; seq <= 5; seq++ {
		p := seq - 1
		if err := store.InsertCheckpoint(b.ctx, batch, store.Checkpoint{RunID: run.ID, Seq: seq, ParentRun: run.ID, ParentSeq: &p, NodeID: "b", Iteration: 1}); err != nil {
			t.Fatalf("queueing: %v", err)
		}
	}
	if err := batch.Send(b.ctx, tx); !errors.Is(err, store.ErrDuplicateResult) {
		t.Errorf("Batch.Send with a duplicate result: %v, want ErrDuplicateResult", err)
	}
	_ = tx.Rollback(b.ctx)

	// A batch without a duplicate commits.
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		batch := &store.Batch{}
		p := 3
		if err := store.InsertCheckpoint(b.ctx, batch, store.Checkpoint{RunID: run.ID, Seq: 4, ParentRun: run.ID, ParentSeq: &p, NodeID: "b", Iteration: 1}); err != nil {
			return err
		}
		if err := store.UpdateRun(b.ctx, batch, run.ID, store.RunUpdate{HeadSeq: 4, Status: runstate.RunRunning}); err != nil {
			return err
		}
		return batch.Send(b.ctx, tx)
	})
	if err != nil {
		t.Fatalf("a batch without a duplicate: %v", err)
	}
	cps, err := store.ListCheckpoints(b.ctx, b.pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int
	for _, c := range cps {
		seqs = append(seqs, c.Seq)
	}
	if !slices.Equal(seqs, []int{0, 1, 2, 3, 4}) {
		t.Errorf("checkpoints %v, want 0-4", seqs)
	}
	if r, _ := store.GetRun(b.ctx, b.pool, run.ID); r.HeadSeq != 4 {
		t.Errorf("head %d after the batch, want 4", r.HeadSeq)
	}
	// An empty batch sends nothing.
	if err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error { return (&store.Batch{}).Send(b.ctx, tx) }); err != nil {
		t.Errorf("an empty batch: %v", err)
	}
}

func node(output string, iteration int) pipeline.NodeState {
	return pipeline.NodeState{Output: output, Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: iteration}
}

// chain inserts deltas as run's checkpoints 0, 1, ..., each the parent of
// the next; the first has the given parent. A delta that records a node's
// success is that node's result.
func (b *bundle) chain(t *testing.T, runID string, parentRun string, parentSeq *int, deltas ...runstate.State) {
	t.Helper()
	for seq, d := range deltas {
		c := store.Checkpoint{RunID: runID, Seq: seq, ParentRun: parentRun, ParentSeq: parentSeq, Delta: api.State(d)}
		if seq > 0 {
			p := seq - 1
			c.ParentRun, c.ParentSeq = runID, &p
		}
		for id, ns := range d.Nodes {
			if ns.Status == pipeline.StatusSucceeded {
				c.NodeID, c.Iteration = id, ns.Iteration // a node's result
			}
		}
		if err := store.InsertCheckpoint(b.ctx, b.pool, c); err != nil {
			t.Fatalf("checkpoint %d of %s: %v", seq, runID, err)
		}
	}
}

func fold(deltas ...runstate.State) runstate.State {
	var s runstate.State
	for _, d := range deltas {
		s.Apply(d)
	}
	return s
}

func (b *bundle) loadState(t *testing.T, runID string, seq int) runstate.State {
	t.Helper()
	st, err := store.LoadState(b.ctx, b.pool, runID, seq)
	if err != nil {
		t.Fatalf("LoadState(%s, %d): %v", runID, seq, err)
	}
	return st
}

func TestLoadStateAcrossFork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := b.newRun(t, store.NewRun{})
	x := []runstate.State{
		{Inputs: map[string]any{"task": "x"}},
		{Nodes: map[string]pipeline.NodeState{"a": node("a out", 1)}},
		{Nodes: map[string]pipeline.NodeState{"b": node("b out", 1)}, Sessions: map[string]string{"r": "s1"}},
		{Nodes: map[string]pipeline.NodeState{"c": node("c out", 1)}, Loops: map[string]int{"c": 1}},
	}
	b.chain(t, src.ID, "", nil, x...)

	at := 1
	fork := b.newRun(t, store.NewRun{ForkedFromRun: src.ID, ForkedFromSeq: &at})
	if fork.ForkedFromRun != src.ID || fork.ForkedFromSeq == nil || *fork.ForkedFromSeq != 1 {
		t.Errorf("the fork's run: %+v", fork)
	}
	y := []runstate.State{
		{Inputs: map[string]any{"task": "y"}, Nodes: map[string]pipeline.NodeState{"a": {Output: "a out", Status: pipeline.StatusPending, Iteration: 1}}},
		{Nodes: map[string]pipeline.NodeState{"a": node("a again", 2)}},
	}
	b.chain(t, fork.ID, src.ID, &at, y...)

	for seq := range x {
		if got, want := b.loadState(t, src.ID, seq), fold(x[:seq+1]...); !reflect.DeepEqual(got, want) {
			t.Errorf("LoadState(src, %d) = %+v, want %+v", seq, got, want)
		}
	}
	// The fork's state is the source's up to checkpoint 1, then the fork's.
	for seq := range y {
		want := fold(append(slices.Clone(x[:2]), y[:seq+1]...)...)
		if got := b.loadState(t, fork.ID, seq); !reflect.DeepEqual(got, want) {
			t.Errorf("LoadState(fork, %d) = %+v, want %+v", seq, got, want)
		}
	}
	if got := b.loadState(t, fork.ID, 1); got.Node("b").Status != pipeline.StatusPending || got.Inputs["task"] != "y" {
		t.Errorf("the fork sees the source's later checkpoints or not its patch: %+v", got)
	}
	// Reading the fork did not change the source.
	if got := b.loadState(t, src.ID, 3); got.Inputs["task"] != "x" || got.Node("a").Output != "a out" {
		t.Errorf("the source's state: %+v", got)
	}

	cps, err := store.ListCheckpoints(b.ctx, b.pool, fork.ID)
	if err != nil || len(cps) != 2 {
		t.Fatalf("ListCheckpoints(fork) = %d, %v", len(cps), err)
	}
	if c := cps[0]; c.ParentRun != src.ID || c.ParentSeq == nil || *c.ParentSeq != 1 || c.NodeID != "" || c.Bytes <= 0 {
		t.Errorf("the fork's first checkpoint: %+v", c)
	}
	if !reflect.DeepEqual(runstate.State(cps[1].Delta), y[1]) {
		t.Errorf("the fork's checkpoint 1 delta = %+v, want %+v", cps[1].Delta, y[1])
	}
	after, err := store.ListCheckpointsAfter(b.ctx, b.pool, src.ID, 1)
	if err != nil || len(after) != 2 || after[0].Seq != 2 || after[1].Seq != 3 {
		t.Errorf("ListCheckpointsAfter(src, 1) = %+v, %v", after, err)
	}
	children, err := store.ForkChildren(b.ctx, b.pool, src.ID, 3)
	if err != nil || len(children) != 1 || children[0].RunID != fork.ID || children[0].Seq != 0 || *children[0].ParentSeq != 1 {
		t.Errorf("ForkChildren(src, 3) = %+v, %v", children, err)
	}
	if children, err := store.ForkChildren(b.ctx, b.pool, src.ID, 1); err != nil || len(children) != 0 {
		t.Errorf("ForkChildren(src, 1) = %+v, %v: the fork starts at 1, not before", children, err)
	}

	for _, c := range []struct {
		run string
		seq int
	}{{src.ID, 4}, {fork.ID, 2}, {uuid.NewString(), 0}} {
		if _, err := store.LoadState(b.ctx, b.pool, c.run, c.seq); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadState(%s, %d): %v, want ErrNotFound", c.run, c.seq, err)
		}
	}
}

func TestSnapshotCompaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{})
	deltas := []runstate.State{
		{Inputs: map[string]any{"task": "t"}},
		{Nodes: map[string]pipeline.NodeState{"a": node("a", 1)}},
		{Nodes: map[string]pipeline.NodeState{"b": node("b", 1)}, Sessions: map[string]string{"r": "s"}},
		{Nodes: map[string]pipeline.NodeState{"a": {Output: "a", Status: pipeline.StatusPending, Iteration: 1}}, Loops: map[string]int{"b": 1}},
		{Nodes: map[string]pipeline.NodeState{"a": node("a2", 2)}},
	}
	b.chain(t, run.ID, "", nil, deltas...)
	before := map[int]runstate.State{}
	for seq := 3; seq < len(deltas); seq++ {
		before[seq] = b.loadState(t, run.ID, seq)
	}

	if err := store.ReplaceWithSnapshot(b.ctx, b.pool, run.ID, 3, before[3]); err != nil {
		t.Fatal(err)
	}
	n, err := store.DeleteCheckpointsBefore(b.ctx, b.pool, run.ID, 3)
	if err != nil || n != 3 {
		t.Fatalf("DeleteCheckpointsBefore = %d, %v; want 3", n, err)
	}
	for seq, want := range before {
		if got := b.loadState(t, run.ID, seq); !reflect.DeepEqual(got, want) {
			t.Errorf("after compaction LoadState(%d) = %+v, want %+v", seq, got, want)
		}
	}
	cps, err := store.ListCheckpoints(b.ctx, b.pool, run.ID)
	if err != nil || len(cps) != 2 || cps[0].Seq != 3 || cps[0].ParentRun != "" || cps[0].ParentSeq != nil {
		t.Fatalf("after compaction: %+v, %v", cps, err)
	}
	if !reflect.DeepEqual(runstate.State(cps[0].Delta), before[3]) {
		t.Errorf("the snapshot %+v, want %+v", cps[0].Delta, before[3])
	}
	if _, err := store.LoadState(b.ctx, b.pool, run.ID, 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a deleted checkpoint: %v, want ErrNotFound", err)
	}
}

func TestRoleSessions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{Thread: "thread-1"})
	a, _ := b.claim(t, run.ID, "A")
	if a.Session != "" {
		t.Errorf("a session before any was saved: %q", a.Session)
	}
	save := func(session, owner string, fence int64) bool {
		t.Helper()
		ok, err := store.SaveRoleSession(b.ctx, b.pool, "thread-1", "writer", session, run.ID, "n", owner, fence)
		if err != nil {
			t.Fatalf("SaveRoleSession: %v", err)
		}
		return ok
	}
	if !save("s1", "A", a.Fence) {
		t.Fatal("the lease holder could not save its session")
	}
	b.expire(t, run.ID)
	bl, _ := b.claim(t, run.ID, "B")
	if bl.Session != "s1" {
		t.Errorf("ClaimLease read session %q, want s1", bl.Session)
	}
	if save("stale", "A", a.Fence) {
		t.Error("a stale fence saved a session")
	}
	if save("stale", "B", a.Fence) {
		t.Error("the owner with an old fence saved a session")
	}
	if got, _ := store.RoleSession(b.ctx, b.pool, "thread-1", "writer"); got != "s1" {
		t.Errorf("after refused saves the session is %q, want s1", got)
	}
	if !save("s2", "B", bl.Fence) {
		t.Error("the new holder could not overwrite the session")
	}
	if got, _ := store.RoleSession(b.ctx, b.pool, "thread-1", "writer"); got != "s2" {
		t.Errorf("session %q, want s2", got)
	}
	if got, err := store.RoleSession(b.ctx, b.pool, "thread-1", "nobody"); got != "" || err != nil {
		t.Errorf("a role without a session: %q, %v", got, err)
	}
	// Seeding a thread keeps what it has.
	if err := store.SeedRoleSessions(b.ctx, b.pool, "thread-1", run.ID, map[string]string{"writer": "seed", "reviewer": "r1"}); err != nil {
		t.Fatal(err)
	}
	got, err := store.ListRoleSessions(b.ctx, b.pool, "thread-1")
	if want := map[string]string{"writer": "s2", "reviewer": "r1"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListRoleSessions = %v, %v; want %v", got, err, want)
	}
}

func TestListRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	specs := []store.NewRun{
		{Pipeline: "p1", Status: runstate.RunRunning, Thread: "t1", Caller: "alice"},
		{Pipeline: "p1", Status: runstate.RunSucceeded, Thread: "t1", Caller: "bob"},
		{Pipeline: "p2", Status: runstate.RunRunning, Thread: "t2", Caller: "alice"},
		{Pipeline: "p1", Status: runstate.RunFailed, Thread: "t3", Caller: "alice"},
		{Pipeline: "p2", Status: runstate.RunWaiting, Thread: "t2", Caller: "bob"},
	}
	var ids []string // oldest first
	for i, s := range specs {
		r := b.newRun(t, s)
		b.exec(t, `UPDATE runs SET created_at = now() - $2 * interval '1 minute' WHERE id = $1`, r.ID, len(specs)-i)
		ids = append(ids, r.ID)
	}
	newestFirst := slices.Clone(ids)
	slices.Reverse(newestFirst)
	list := func(f store.ListFilter) []string {
		t.Helper()
		runs, err := store.ListRuns(b.ctx, b.pool, f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		out := []string{}
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	pick := func(idx ...int) []string {
		out := []string{}
		for _, i := range idx {
			out = append(out, ids[i])
		}
		return out
	}
	tests := []struct {
		name string
		f    store.ListFilter
		want []string
	}{
		{"all", store.ListFilter{}, newestFirst},
		{"pipeline", store.ListFilter{Pipeline: "p1"}, pick(3, 1, 0)},
		{"status", store.ListFilter{Status: runstate.RunRunning}, pick(2, 0)},
		{"thread", store.ListFilter{Thread: "t2"}, pick(4, 2)},
		{"caller", store.ListFilter{Caller: "bob"}, pick(4, 1)},
		{"combined", store.ListFilter{Pipeline: "p1", Caller: "alice"}, pick(3, 0)},
		{"no match", store.ListFilter{Pipeline: "p3"}, []string{}},
		{"limit", store.ListFilter{Limit: 2}, newestFirst[:2]},
		{"before", store.ListFilter{Before: ids[3]}, pick(2, 1, 0)},
		{"before with a filter", store.ListFilter{Before: ids[3], Caller: "alice"}, pick(2, 0)},
		{"before the oldest", store.ListFilter{Before: ids[0]}, []string{}},
	}
	for _, tt := range tests {
		if got := list(tt.f); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	// Paging through with Before visits every run once, newest first.
	var paged []string
	f := store.ListFilter{Limit: 2}
	for range len(ids) {
		page := list(f)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		f.Before = page[len(page)-1]
	}
	if !slices.Equal(paged, newestFirst) {
		t.Errorf("paged %v, want %v", paged, newestFirst)
	}
	if _, err := store.ListRuns(b.ctx, b.pool, store.ListFilter{Before: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a malformed Before: %v, want ErrNotFound", err)
	}
}

func TestGetRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := 0
	src := b.newRun(t, store.NewRun{Caller: "alice"})
	run := b.newRun(t, store.NewRun{Pipeline: "px", PipelineHash: "hx", Thread: "tx", Caller: "bob", Status: runstate.RunFailed, Error: "boom", ForkedFromRun: src.ID, ForkedFromSeq: &at})
	got, err := store.GetRun(b.ctx, b.pool, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != run.ID || got.Pipeline != "px" || got.PipelineHash != "hx" || got.Thread != "tx" || got.Caller != "bob" ||
		got.Status != runstate.RunFailed || got.Error != "boom" || got.HeadSeq != 0 || got.ForkedFromRun != src.ID ||
		got.ForkedFromSeq == nil || *got.ForkedFromSeq != 0 || got.FinishedAt == nil {
		t.Errorf("GetRun = %+v", got)
	}
	if s, _ := store.GetRun(b.ctx, b.pool, src.ID); s.FinishedAt != nil || s.Error != "" || s.ForkedFromRun != "" || s.ForkedFromSeq != nil {
		t.Errorf("a running run without a fork: %+v", s)
	}
	for _, id := range []string{"", "nope", "12345678-1234-1234-1234-12345678901z", strings.ToUpper(uuid.NewString()), uuid.NewString() + "0", uuid.NewString()} {
		if _, err := store.GetRun(b.ctx, b.pool, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetRun(%q): %v, want ErrNotFound", id, err)
		}
	}
	// Upper-case hex is a valid id.
	if r, err := store.GetRun(b.ctx, b.pool, strings.ToUpper(run.ID)); err != nil || r.ID != run.ID {
		t.Errorf("GetRun(upper case) = %+v, %v", r, err)
	}
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := store.LockRun(b.ctx, tx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LockRun(malformed): %v, want ErrNotFound", err)
	}
	if r, err := store.LockRun(b.ctx, tx, run.ID); err != nil || r.ID != run.ID {
		t.Errorf("LockRun = %+v, %v", r, err)
	}
}

func TestCheckpointBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if n, size, err := store.CheckpointBytes(b.ctx, b.pool); err != nil || n != 0 || size != 0 {
		t.Fatalf("an empty database: %d checkpoints, %d bytes, %v", n, size, err)
	}
	run := b.newRun(t, store.NewRun{})
	b.chain(t, run.ID, "", nil,
		runstate.State{Inputs: map[string]any{"task": "t"}},
		runstate.State{Nodes: map[string]pipeline.NodeState{"a": node("a", 1)}},
	)
	n2, size2, err := store.CheckpointBytes(b.ctx, b.pool)
	if err != nil || n2 != 2 || size2 <= 0 {
		t.Fatalf("two checkpoints: %d, %d bytes, %v", n2, size2, err)
	}
	p := 1
	big := api.State{Nodes: map[string]pipeline.NodeState{"b": node(strings.Repeat("output ", 200), 1)}}
	if err := store.InsertCheckpoint(b.ctx, b.pool, store.Checkpoint{RunID: run.ID, Seq: 2, ParentRun: run.ID, ParentSeq: &p, NodeID: "b", Iteration: 1, Delta: big}); err != nil {
		t.Fatal(err)
	}
	n3, size3, err := store.CheckpointBytes(b.ctx, b.pool)
	if err != nil || n3 != 3 || size3 <= size2 {
		t.Errorf("three checkpoints: %d, %d bytes (was %d), %v", n3, size3, size2, err)
	}
}

// startedRun inserts a running run at its first checkpoint, its lease
// held by owner.
func (b *bundle) startedRun(t *testing.T, owner string) (store.Run, store.Lease) {
	t.Helper()
	run := b.newRun(t, store.NewRun{})
	if err := store.InsertCheckpoint(b.ctx, b.pool, store.Checkpoint{RunID: run.ID, Seq: 0}); err != nil {
		t.Fatal(err)
	}
	l, _ := b.claim(t, run.ID, owner)
	return run, l
}

// A guarded batch writes everything or nothing: it commits when the run is
// as its guard says, and otherwise writes none of its statements, the one
// before a failing statement included.
func TestSendGuarded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run, l := b.startedRun(t, "A")
	if _, err := store.SaveRoleSession(b.ctx, b.pool, run.Thread, "writer", "s-1", run.ID, "one", "A", l.Fence); err != nil {
		t.Fatal(err)
	}
	step := func(head int, node string, attempt int) *store.Batch {
		batch := &store.Batch{}
		parent := head
		if err := store.InsertAttempt(b.ctx, batch, store.Attempt{RunID: run.ID, NodeID: node, Iteration: 1, Attempt: attempt, Replica: "A", Status: "succeeded", StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := store.InsertCheckpoint(b.ctx, batch, store.Checkpoint{RunID: run.ID, Seq: head + 1, ParentRun: run.ID, ParentSeq: &parent, NodeID: node, Iteration: 1}); err != nil {
			t.Fatal(err)
		}
		if err := store.UpdateRun(b.ctx, batch, run.ID, store.RunUpdate{HeadSeq: head + 1, Status: runstate.RunRunning}); err != nil {
			t.Fatal(err)
		}
		return batch
	}
	attempts := func() int {
		var n int
		if err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM node_attempts WHERE run_id = $1`, run.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	guard := store.StepGuard{RunID: run.ID, Owner: "A", Fence: l.Fence, Head: 0}

	sessions, err := step(0, "one", 1).SendGuarded(b.ctx, b.pool, guard)
	if err != nil {
		t.Fatalf("a step over the run's head: %v", err)
	}
	if sessions["writer"] != "s-1" {
		t.Errorf("sessions %v, want writer s-1", sessions)
	}
	if r, _ := store.GetRun(b.ctx, b.pool, run.ID); r.HeadSeq != 1 || attempts() != 1 {
		t.Fatalf("after the step: head %d, %d attempts; want 1 and 1", r.HeadSeq, attempts())
	}

	for name, g := range map[string]store.StepGuard{
		"an old head":    guard, // head 0; the run is at 1
		"another owner":  {RunID: run.ID, Owner: "B", Fence: l.Fence, Head: 1},
		"an older fence": {RunID: run.ID, Owner: "A", Fence: l.Fence - 1, Head: 1},
		"no such run":    {RunID: uuid.NewString(), Owner: "A", Fence: l.Fence, Head: 1},
	} {
		if _, err := step(1, "two", 1).SendGuarded(b.ctx, b.pool, g); !errors.Is(err, store.ErrRunMoved) {
			t.Errorf("%s: %v, want ErrRunMoved", name, err)
		}
	}
	// A duplicate result fails the batch after its attempt row was sent:
	// that row is not written either.
	if _, err := step(1, "one", 2).SendGuarded(b.ctx, b.pool, store.StepGuard{RunID: run.ID, Owner: "A", Fence: l.Fence, Head: 1}); !errors.Is(err, store.ErrDuplicateResult) {
		t.Errorf("a second result of one: %v, want ErrDuplicateResult", err)
	}
	if r, _ := store.GetRun(b.ctx, b.pool, run.ID); r.HeadSeq != 1 || attempts() != 1 {
		t.Errorf("after the refused steps: head %d, %d attempts; want 1 and 1", r.HeadSeq, attempts())
	}
	// An ended run takes no step.
	b.exec(t, `UPDATE runs SET status = 'cancelled' WHERE id = $1`, run.ID)
	if _, err := step(1, "two", 1).SendGuarded(b.ctx, b.pool, store.StepGuard{RunID: run.ID, Owner: "A", Fence: l.Fence, Head: 1}); !errors.Is(err, store.ErrRunMoved) {
		t.Errorf("a cancelled run: %v, want ErrRunMoved", err)
	}
}

// The run's inline_job is cleared by the commit of the node iteration it
// names, kept by others', replaced when set, and cleared when the run
// ends.
func TestUpdateRunInlineJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{})
	inline := func() string {
		var job *string
		if err := b.pool.QueryRow(b.ctx, `SELECT inline_job::text FROM runs WHERE id = $1`, run.ID).Scan(&job); err != nil {
			t.Fatal(err)
		}
		if job == nil {
			return ""
		}
		return *job
	}
	update := func(u store.RunUpdate) {
		t.Helper()
		u.Status = runstate.RunRunning
		if err := store.UpdateRun(b.ctx, b.pool, run.ID, u); err != nil {
			t.Fatal(err)
		}
	}
	job := []byte(`{"run_id": "` + run.ID + `", "node_id": "two", "iteration": 2}`)
	update(store.RunUpdate{InlineJob: job})
	if !strings.Contains(inline(), `"two"`) {
		t.Fatalf("inline_job %q after setting it", inline())
	}
	update(store.RunUpdate{WorkedNode: "one", WorkedIteration: 2})
	update(store.RunUpdate{WorkedNode: "two", WorkedIteration: 1})
	if inline() == "" {
		t.Fatal("another node's or iteration's commit cleared the inline job")
	}
	update(store.RunUpdate{WorkedNode: "two", WorkedIteration: 2})
	if got := inline(); got != "" {
		t.Fatalf("inline_job %q after its node's commit, want none", got)
	}
	update(store.RunUpdate{InlineJob: job})
	if err := store.UpdateRun(b.ctx, b.pool, run.ID, store.RunUpdate{Status: runstate.RunFailed}); err != nil {
		t.Fatal(err)
	}
	if got := inline(); got != "" {
		t.Errorf("inline_job %q after the run failed, want none", got)
	}
}

// The guard waits for a writer that holds the run's row and sees what it
// committed: a run cancelled meanwhile takes no step.
func TestSendGuardedWaitsForTheRowLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run, l := b.startedRun(t, "A")
	cancel, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cancel.Rollback(b.ctx) }()
	if _, err := cancel.Exec(b.ctx, `UPDATE runs SET status = 'cancelled' WHERE id = $1`, run.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		batch := &store.Batch{}
		parent := 0
		_ = store.InsertCheckpoint(b.ctx, batch, store.Checkpoint{RunID: run.ID, Seq: 1, ParentRun: run.ID, ParentSeq: &parent, NodeID: "one", Iteration: 1})
		_ = store.UpdateRun(b.ctx, batch, run.ID, store.RunUpdate{HeadSeq: 1, Status: runstate.RunRunning})
		_, err := batch.SendGuarded(b.ctx, b.pool, store.StepGuard{RunID: run.ID, Owner: "A", Fence: l.Fence, Head: 0})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the step did not wait for the row's lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := cancel.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrRunMoved) {
		t.Errorf("a step over a run cancelled meanwhile: %v, want ErrRunMoved", err)
	}
	if r, _ := store.GetRun(b.ctx, b.pool, run.ID); r.Status != runstate.RunCancelled || r.HeadSeq != 0 {
		t.Errorf("run %s at %d after the refused step; want cancelled at 0", r.Status, r.HeadSeq)
	}
}

// An attempt's cost is kept to the cent and beyond, and a run's cost sums
// its attempts': a cost is rarely a whole number of dollars.
func TestAttemptCostsKeepTheirCents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{})
	for i, cost := range []float64{0.73, 3.9, 0} {
		if err := store.InsertAttempt(b.ctx, b.pool, store.Attempt{RunID: run.ID, NodeID: "one", Iteration: 1, Attempt: i + 1, Replica: "A", Status: "failed", CostUSD: cost, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	as, err := store.ListAttempts(b.ctx, b.pool, run.ID)
	if err != nil || len(as) != 3 || as[0].CostUSD != 0.73 || as[1].CostUSD != 3.9 || as[2].CostUSD != 0 {
		t.Fatalf("attempts %+v (%v), want costs 0.73, 3.9 and 0", as, err)
	}
	costs, err := store.RunCosts(b.ctx, b.pool, []string{run.ID})
	if err != nil || math.Abs(costs[run.ID]-4.63) > 1e-9 {
		t.Errorf("run costs %v (%v), want 4.63", costs, err)
	}
}

// An agent's event is its own text: a NUL in it (a command the agent ran,
// a violation quoting one) is stored as a replacement character, not left
// to fail the insert and lose the event.
func TestAgentEventWithANulIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.newRun(t, store.NewRun{})
	ev := meshtype.AgentEvent{Kind: "pre_tool", Tool: "Bash", Text: "Running cat a\x00b", Decision: &meshtype.ToolDecision{
		Tool: "Bash", Violations: []meshtype.Violation{{ConstraintID: "commands", Violated: true, Message: "command \"cat a\x00b\" is not allowed"}},
	}}
	if err := store.AddAgentEvent(b.ctx, b.pool, run.ID, "one", ev); err != nil {
		t.Fatalf("AddAgentEvent: %v", err)
	}
	evs, err := store.ListAgentEventsAfter(b.ctx, b.pool, run.ID, 0)
	if err != nil || len(evs) != 1 || evs[0].Text != "Running cat a\uFFFDb" || evs[0].Decision == nil || len(evs[0].Decision.Violations) != 1 || !strings.Contains(evs[0].Decision.Violations[0].Message, "a\uFFFDb") {
		t.Fatalf("events %+v (%v)", evs, err)
	}
}
