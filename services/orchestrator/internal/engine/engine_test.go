package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// A linear run: outputs flow through the templates, one checkpoint per
// node, each role's session saved and resumed by its next node.
func TestLinearRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	run := start(t, b.eng, "linear", map[string]any{"task": "hello"})
	v := waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)

	if got, want := v.Outputs["three"], "a: three: b: two: a: one: hello"; got != want {
		t.Errorf("three's output = %q, want %q", got, want)
	}
	cps, err := b.eng.Checkpoints(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 4 { // start + one per node
		t.Fatalf("%d checkpoints, want 4: %+v", len(cps), cps)
	}
	for i, want := range []string{"", "one", "two", "three"} {
		if cps[i].NodeID != want || cps[i].Seq != i {
			t.Errorf("checkpoint %d: node %q seq %d, want %q", i, cps[i].NodeID, cps[i].Seq, want)
		}
	}
	if v.Sessions["a"] == "" || v.Sessions["b"] == "" {
		t.Fatalf("sessions %v: want one per role", v.Sessions)
	}
	calls := b.exec.Calls()
	if calls[0].SessionID != "" || calls[2].SessionID != v.Sessions["a"] {
		t.Errorf("role a's second node resumed session %q, want %q (first call had %q)", calls[2].SessionID, v.Sessions["a"], calls[0].SessionID)
	}
	var ids []string
	for _, c := range calls {
		ids = append(ids, c.NodeID)
	}
	if fmt.Sprint(ids) != "[one two three]" {
		t.Errorf("calls %v, want each node once", ids)
	}
	// No node had a River job: the replica that created the run worked
	// one at once, and two and three inline after it; the run's
	// inline_job is clear.
	var jobs, scheduled int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE state = 'scheduled')
		FROM river_job WHERE args->>'run_id' = $1`, run.ID).Scan(&jobs, &scheduled); err != nil {
		t.Fatal(err)
	}
	if jobs != 0 {
		t.Errorf("%d River jobs of the run (%d scheduled), want none", jobs, scheduled)
	}
	for _, a := range v.Attempts {
		if a.JobID != 0 {
			t.Errorf("node %s's attempt records job %d, want none", a.NodeID, a.JobID)
		}
	}
	var inlineLeft bool
	if err := b.pool.QueryRow(context.Background(), `SELECT inline_job IS NOT NULL FROM runs WHERE id = $1`, run.ID).Scan(&inlineLeft); err != nil {
		t.Fatal(err)
	}
	if inlineLeft {
		t.Error("the finished run still records an inline node")
	}
}

// What an agent reports it spent is its own word: a cost in range is kept
// to the cent, and a negative or absurd one (past what an attempt's row
// holds) is kept as none rather than failing the node's commit, which would
// run the agent again and again.
func TestReportedCosts(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.PoolAndDSN(t)
	costs := map[string]float64{"one": 0.73, "two": -1, "three": 1e9}
	x := &enginetest.InstantExecutor{Record: true, Cost: func(req executor.Request) float64 { return costs[req.NodeID] }}
	eng := startEngine(t, pool, loadTestCatalog(t), map[pipeline.Via]executor.Executor{pipeline.ViaMesh: x}, "")
	run := start(t, eng, "linear", map[string]any{"task": "hello"})
	v := waitStatus(t, eng, run.ID, runstate.RunSucceeded)
	got := map[string]float64{}
	for _, a := range v.Attempts {
		got[a.NodeID] = a.CostUSD
	}
	if len(v.Attempts) != 3 || got["one"] != 0.73 || got["two"] != 0 || got["three"] != 0 {
		t.Errorf("attempts %+v, want one attempt a node, costing 0.73, 0 and 0", v.Attempts)
	}
}

// A foreach node costs what its items reported, each in range.
func TestForeachCostsWhatItsItemsCost(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.PoolAndDSN(t)
	x := &enginetest.InstantExecutor{Record: true, Cost: func(req executor.Request) float64 {
		if req.Item == "each/2" {
			return -4 // out of range: none
		}
		return 0.5
	}}
	eng := startEngine(t, pool, loadTestCatalog(t), map[pipeline.Via]executor.Executor{pipeline.ViaMesh: x}, "")
	run := start(t, eng, "fanout", map[string]any{"topics": "a,b,c,d"})
	v := waitStatus(t, eng, run.ID, runstate.RunSucceeded)
	i := slices.IndexFunc(v.Attempts, func(a api.Attempt) bool { return a.NodeID == "each" })
	if i < 0 || v.Attempts[i].CostUSD != 1.5 {
		t.Errorf("attempts %+v; want each's to cost 1.5 (three items at 0.5, one out of range)", v.Attempts)
	}
}

// A second run on the same thread resumes each role's own session.
func TestThreadResumesSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := start(t, b.eng, "linear", map[string]any{"task": "x"})
	v1 := waitStatus(t, b.eng, first.ID, runstate.RunSucceeded)
	second, err := b.eng.StartRun(context.Background(), engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "y"}, Thread: first.Thread})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, b.eng, second.ID, runstate.RunSucceeded)
	for _, c := range b.exec.Calls() {
		if c.RunID == second.ID && c.SessionID != v1.Sessions[c.RoleName] {
			t.Errorf("run 2 node %s used session %q, want role %s's %q", c.NodeID, c.SessionID, c.RoleName, v1.Sessions[c.RoleName])
		}
	}
}

// The runs of a thread take turns: while one runs, no other run starts,
// forks onto, or resumes (an approval, a failed run) on the thread; the
// refusal names the running run and leaves nothing behind. A run waiting
// for an approval leaves the thread to the next, and of starts that race on
// a thread, one runs.
func TestRunsOfAThreadTakeTurns(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	// An attempt that returns only when the test says, whatever its context
	// says: an agent that takes its time to stop.
	stubbornStarted, stubborn := make(chan struct{}), make(chan struct{})
	b := setup(t, func(req executor.Request) (string, error) {
		switch {
		case req.Task == "one: fail" && failing.Load():
			return "", errors.New("the agent failed")
		case req.Task == "one: stubborn":
			close(stubbornStarted)
			<-stubborn
		}
		return "ok", nil
	})
	ctx := context.Background()
	untilFree := func(call func() error) (err error) {
		enginetest.WhileConflict(func() bool { err = call(); return errors.Is(err, engine.ErrConflict) })
		return err
	}
	draft := start(t, b.eng, "approval", nil)
	waiting := waitStatus(t, b.eng, draft.ID, runstate.RunWaiting)
	failed, err := b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "fail"}, Thread: draft.Thread})
	if err != nil {
		t.Fatalf("starting a run on the thread of a run waiting for an approval: %v", err)
	}
	waitStatus(t, b.eng, failed.ID, runstate.RunFailed)

	release := b.exec.Hold("one: hold")
	defer release()
	var held api.Run
	if err := untilFree(func() (err error) {
		held, err = b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "hold"}, Thread: draft.Thread})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, engine.ErrConflict) || !strings.Contains(err.Error(), held.ID) {
			t.Errorf("%s while run %s runs on the thread: %v; want a conflict naming that run", what, held.ID, err)
		}
	}
	_, err = b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "x"}, Thread: draft.Thread})
	refused("a start", err)
	_, err = b.eng.Fork(ctx, engine.ForkRequest{RunID: draft.ID, Seq: 0, Thread: draft.Thread})
	refused("a fork onto the thread", err)
	_, err = b.eng.Resume(ctx, engine.ResumeRequest{InterruptID: waiting.Interrupts[0].ID, Value: json.RawMessage(`"yes"`)})
	refused("an approval", err)
	failing.Store(false)
	_, err = b.eng.Resume(ctx, engine.ResumeRequest{RunID: failed.ID})
	refused("resuming a failed run", err)
	// A fork onto a thread of its own is not held.
	fork, err := b.eng.Fork(ctx, engine.ForkRequest{RunID: draft.ID, Seq: 0})
	if err != nil {
		t.Fatalf("a fork onto a new thread: %v", err)
	}
	waitStatus(t, b.eng, fork.ID, runstate.RunWaiting)

	runs, err := b.eng.ListRuns(ctx, store.ListFilter{Thread: draft.Thread})
	if err != nil || len(runs) != 3 {
		t.Errorf("runs on the thread: %d, %v; want the three that were started", len(runs), err)
	}
	if v, err := b.eng.GetRun(ctx, draft.ID); err != nil || v.Status != runstate.RunWaiting || v.Interrupts[0].Status != "pending" {
		t.Fatalf("the refused approval's run: %+v, %v; want it waiting, its interrupt pending", v.Run, err)
	}
	if v, err := b.eng.GetRun(ctx, failed.ID); err != nil || v.Status != runstate.RunFailed {
		t.Fatalf("the refused resume's run: %+v, %v; want it failed", v.Run, err)
	}

	release()
	waitStatus(t, b.eng, held.ID, runstate.RunSucceeded)
	if err := untilFree(func() error {
		_, err := b.eng.Resume(ctx, engine.ResumeRequest{InterruptID: waiting.Interrupts[0].ID, Value: json.RawMessage(`"yes"`)})
		return err
	}); err != nil {
		t.Fatalf("the approval once the thread is free: %v", err)
	}
	waitStatus(t, b.eng, draft.ID, runstate.RunSucceeded)
	if err := untilFree(func() error {
		_, err := b.eng.Resume(ctx, engine.ResumeRequest{RunID: failed.ID})
		return err
	}); err != nil {
		t.Fatalf("resuming the failed run once the thread is free: %v", err)
	}
	waitStatus(t, b.eng, failed.ID, runstate.RunSucceeded)

	// Starts that race on a new thread: one runs, the others are refused.
	releaseRace := b.exec.Hold("one: race")
	defer releaseRace()
	const racers = 6
	type result struct {
		run api.Run
		err error
	}
	results := make(chan result, racers)
	for range racers {
		go func() {
			run, err := b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "race"}, Thread: "race"})
			results <- result{run, err}
		}()
	}
	var winners []api.Run
	for range racers {
		switch r := <-results; {
		case r.err == nil:
			winners = append(winners, r.run)
		case !errors.Is(r.err, engine.ErrConflict):
			t.Errorf("a racing start: %v; want it started or refused as a conflict", r.err)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d of %d starts racing on a thread ran; want 1", len(winners), racers)
	}
	releaseRace()
	waitStatus(t, b.eng, winners[0].ID, runstate.RunSucceeded)

	// A cancelled run holds its thread until its attempt under way returns.
	var slow api.Run
	if err := untilFree(func() (err error) {
		slow, err = b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "stubborn"}, Thread: "race"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	<-stubbornStarted
	if _, err := b.eng.Cancel(ctx, slow.ID); err != nil {
		t.Fatal(err)
	}
	_, err = b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "x"}, Thread: "race"})
	if !errors.Is(err, engine.ErrConflict) || !strings.Contains(err.Error(), slow.ID) || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("a start while a cancelled run's attempt still runs on the thread: %v; want a conflict naming it", err)
	}
	close(stubborn)
	if err := untilFree(func() error {
		_, err := b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "x"}, Thread: "race"})
		return err
	}); err != nil {
		t.Errorf("a start once the cancelled run's attempt returned: %v", err)
	}
}

// The bounded loop follows next at most max_iterations times; a false when
// skips a node.
func TestLoopAndWhen(t *testing.T) {
	t.Parallel()
	t.Run("bounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(r executor.Request) (string, error) {
			if r.NodeID == "review" {
				return "CHANGES please", nil
			}
			return "ok", nil
		})
		run := start(t, b.eng, "loop", nil)
		v := waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
		count := map[string]int{}
		for _, c := range b.exec.Calls() {
			count[c.NodeID]++
		}
		// next followed twice: write, review and revise run three times.
		if count["write"] != 3 || count["review"] != 3 || count["revise"] != 3 || count["done"] != 1 {
			t.Errorf("calls per node %v, want write/review/revise 3 and done 1", count)
		}
		if v.Loops["revise"] != 2 {
			t.Errorf("loops %v, want revise 2", v.Loops)
		}
	})
	t.Run("when false skips", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(r executor.Request) (string, error) { return "APPROVED", nil })
		run := start(t, b.eng, "loop", nil)
		v := waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
		for _, n := range v.Nodes {
			if n.ID == "revise" && n.Status != pipeline.StatusSkipped {
				t.Errorf("revise is %s, want skipped", n.Status)
			}
		}
		for _, c := range b.exec.Calls() {
			if c.NodeID == "revise" {
				t.Error("revise ran although its when was false")
			}
		}
	})
}

// A node scheduled by a commit while another node of the run still runs on
// this replica (so its lease is shared, with the run as it was claimed) is
// given the state of that commit: its task sees the node it needs.
func TestANodeSeesTheCommitThatScheduledIt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	release := b.exec.Hold("slow")
	defer release()
	run := start(t, b.eng, "fastslow", nil)
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(b.exec.Calls(), func(r executor.Request) bool { return r.NodeID == "after" }) {
		if v, _ := b.eng.GetRun(context.Background(), run.ID); v.Status == runstate.RunFailed || time.Now().After(deadline) {
			t.Fatalf("after did not run while slow held the lease: status %s, error %q", v.Status, v.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
	release()
	waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
	for _, c := range b.exec.Calls() {
		if c.NodeID == "after" && !strings.Contains(c.Task, "a: fast") {
			t.Errorf("after's task %q lacks fast's output", c.Task)
		}
	}
}

// Failed attempts are retried with backoff and recorded; the last failure
// fails the run.
func TestRetries(t *testing.T) {
	t.Parallel()
	t.Run("succeeds on the third attempt", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int32
		b := setup(t, func(r executor.Request) (string, error) {
			if r.NodeID == "flaky" && n.Add(1) < 3 {
				return "partial", errors.New("agent crashed")
			}
			return "fine", nil
		})
		run := start(t, b.eng, "retry", nil)
		v := waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
		var statuses []string
		for _, a := range v.Attempts {
			if a.NodeID == "flaky" {
				statuses = append(statuses, fmt.Sprintf("%d:%s", a.Attempt, a.Status))
			}
		}
		if fmt.Sprint(statuses) != "[1:failed 2:failed 3:succeeded]" {
			t.Errorf("flaky's attempts %v", statuses)
		}
		for _, n := range v.Nodes {
			if n.ID == "flaky" && n.Attempts != 3 {
				t.Errorf("flaky's state says %d attempts, want 3", n.Attempts)
			}
		}
	})
	t.Run("a refused request is not made again", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(r executor.Request) (string, error) {
			return "", executor.Refused(errors.New("spawn_worker: no git repository at /sources/nope"))
		})
		run := start(t, b.eng, "retry", nil)
		v := waitStatus(t, b.eng, run.ID, runstate.RunFailed)
		if len(v.Attempts) != 1 || !contains(v.Error, "no git repository at /sources/nope") {
			t.Errorf("%d attempts, run error %q; want 1 attempt, failed with the refusal", len(v.Attempts), v.Error)
		}
	})
	t.Run("fails after max_attempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(r executor.Request) (string, error) { return "", errors.New("always broken") })
		run := start(t, b.eng, "retry", nil)
		v := waitStatus(t, b.eng, run.ID, runstate.RunFailed)
		if !contains(v.Error, "flaky failed after 3 attempt(s): always broken") {
			t.Errorf("run error %q", v.Error)
		}
		if len(v.Attempts) != 3 {
			t.Errorf("%d attempts recorded, want 3", len(v.Attempts))
		}
		// A failed run can be resumed: the failed node runs again.
		if _, err := b.eng.Resume(context.Background(), engine.ResumeRequest{RunID: run.ID}); err != nil {
			t.Fatal(err)
		}
		waitStatus(t, b.eng, run.ID, runstate.RunFailed)
		v, _ = b.eng.GetRun(context.Background(), run.ID)
		if len(v.Attempts) != 6 {
			t.Errorf("%d attempts after the resume, want 6", len(v.Attempts))
		}
	})
}

// An approval parks the run; resuming the interrupt by id continues it and
// records the decision; a second resume is refused.
func TestApproval(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	run := start(t, b.eng, "approval", nil)
	v := waitStatus(t, b.eng, run.ID, runstate.RunWaiting)
	if len(v.Interrupts) != 1 || v.Interrupts[0].Status != "pending" || v.Interrupts[0].NodeID != "approve" {
		t.Fatalf("interrupts %+v", v.Interrupts)
	}
	for _, c := range b.exec.Calls() {
		if c.NodeID == "publish" {
			t.Fatal("publish ran before the approval")
		}
	}
	id := v.Interrupts[0].ID
	if _, err := b.eng.Resume(ctx, engine.ResumeRequest{InterruptID: id, Value: json.RawMessage(`"approved by legal"`), DecidedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
	if got := v.Outputs["publish"]; got != "a: publish with approved by legal" {
		t.Errorf("publish output %q", got)
	}
	if in := v.Interrupts[0]; in.Status != "resumed" || in.DecidedBy != "alice" || string(in.Value) != `"approved by legal"` {
		t.Errorf("recorded decision %+v", in)
	}
	_, err := b.eng.Resume(ctx, engine.ResumeRequest{InterruptID: id, Value: json.RawMessage(`"again"`)})
	if !errIs(err, engine.ErrConflict) {
		t.Errorf("second resume: %v, want ErrConflict", err)
	}
}

// foreach fans out over items and joins their outputs.
func TestForeach(t *testing.T) {
	t.Parallel()
	b := setup(t, func(r executor.Request) (string, error) {
		if r.NodeID == "split" {
			return "x,y,z", nil
		}
		return r.Task, nil
	})
	run := start(t, b.eng, "fanout", map[string]any{"topics": "t"})
	v := waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
	if got := v.Outputs["each"]; got != `["about x","about y","about z"]` {
		t.Errorf("each's output %q", got)
	}
}

// Forking from the checkpoint after the first node re-runs only the nodes
// after it, and copies no checkpoint.
func TestFork(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	run := start(t, b.eng, "linear", map[string]any{"task": "orig"})
	waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
	before := len(b.exec.Calls())

	fork, err := b.eng.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	v := waitStatus(t, b.eng, fork.ID, runstate.RunSucceeded)
	var rerun []string
	for _, c := range b.exec.Calls()[before:] {
		rerun = append(rerun, c.NodeID)
	}
	if fmt.Sprint(rerun) != "[two three]" {
		t.Errorf("the fork ran %v, want [two three]", rerun)
	}
	// Role a's session came with the checkpoint: three works in a copy of
	// it, since the source run may go on in it; role b had none there.
	source, _ := b.eng.GetRun(ctx, run.ID)
	for _, c := range b.exec.Calls()[before:] {
		if fork := c.NodeID == "three"; c.ForkSession != fork || fork && c.SessionID != source.Sessions["a"] {
			t.Errorf("fork's %s: session %q, fork_session %v; want a copy of %q for three only", c.NodeID, c.SessionID, c.ForkSession, source.Sessions["a"])
		}
	}
	if v.ForkedFromRun != run.ID || *v.ForkedFromSeq != 1 {
		t.Errorf("fork's origin %s@%v", v.ForkedFromRun, v.ForkedFromSeq)
	}
	cps, _ := b.eng.Checkpoints(ctx, fork.ID)
	if len(cps) != 3 || cps[0].ParentRun != run.ID || len(cps[0].Delta.Nodes) != 0 {
		t.Errorf("fork's checkpoints %+v: want a first one that is an empty delta over the source", cps)
	}
	if v.Outputs["one"] != "a: one: orig" {
		t.Errorf("the fork sees one's output %q", v.Outputs["one"])
	}

	// A patch changes inputs: forking from the start re-runs everything.
	patched, err := b.eng.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: 0, Patch: &runstate.State{Inputs: map[string]any{"task": "patched"}}})
	if err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, b.eng, patched.ID, runstate.RunSucceeded)
	if v.Outputs["three"] != "a: three: b: two: a: one: patched" {
		t.Errorf("patched fork's output %q", v.Outputs["three"])
	}

	// Pruning the source keeps the fork whole.
	n, err := b.eng.Prune(ctx, run.ID, 1)
	if err != nil || n != 3 {
		t.Fatalf("prune deleted %d, %v; want 3", n, err)
	}
	v, err = b.eng.GetRun(ctx, fork.ID)
	if err != nil || v.Outputs["one"] != "a: one: orig" {
		t.Fatalf("fork after pruning its source: %v %q", err, v.Outputs["one"])
	}
	src, err := b.eng.GetRun(ctx, run.ID)
	if err != nil || src.Outputs["three"] == "" {
		t.Fatalf("source after pruning: %v %+v", err, src.Outputs)
	}
}

// Bad input gets a clear error and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	count := func() int {
		var n int
		if err := b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM runs) + (SELECT count(*) FROM checkpoints) + (SELECT count(*) FROM interrupts)").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	var inv *engine.InvalidError
	_, err := b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "nope"})
	if !errIs(err, engine.ErrNotFound) || !contains(err.Error(), "known: ") {
		t.Errorf("unknown pipeline: %v", err)
	}
	_, err = b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear"})
	if !errors.As(err, &inv) || !contains(err.Error(), "task") {
		t.Errorf("missing required input: %v", err)
	}
	_, err = b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": 3}})
	if !errors.As(err, &inv) {
		t.Errorf("wrongly typed input: %v", err)
	}
	_, err = b.eng.Resume(ctx, engine.ResumeRequest{InterruptID: "00000000-0000-0000-0000-000000000000", Value: json.RawMessage(`"x"`)})
	if !errIs(err, engine.ErrNotFound) {
		t.Errorf("unknown interrupt: %v", err)
	}
	_, err = b.eng.Resume(ctx, engine.ResumeRequest{InterruptID: "not-a-uuid", Value: json.RawMessage(`"x"`)})
	if !errIs(err, engine.ErrNotFound) {
		t.Errorf("malformed interrupt id: %v", err)
	}
	_, err = b.eng.GetRun(ctx, "nope")
	if !errIs(err, engine.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	_, err = b.eng.Fork(ctx, engine.ForkRequest{RunID: "00000000-0000-0000-0000-000000000000"})
	if !errIs(err, engine.ErrNotFound) {
		t.Errorf("fork of an unknown run: %v", err)
	}
	if after := count(); after != before {
		t.Errorf("rows went from %d to %d", before, after)
	}
	// A fork patch naming an unknown node, and a bad checkpoint.
	run := start(t, b.eng, "linear", map[string]any{"task": "x"})
	waitStatus(t, b.eng, run.ID, runstate.RunSucceeded)
	_, err = b.eng.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: 1, Patch: &runstate.State{Nodes: map[string]pipeline.NodeState{"ghost": {Status: "pending"}}}})
	if !errors.As(err, &inv) || !contains(err.Error(), "ghost") {
		t.Errorf("patch with an unknown node: %v", err)
	}
	// A node's patch comes only from its worker, through the result gate.
	_, err = b.eng.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: 0, Patch: &runstate.State{Nodes: map[string]pipeline.NodeState{"one": {Status: "succeeded", Patch: "diff --git a/x b/x\n"}}}})
	if !errors.As(err, &inv) || !contains(err.Error(), "cannot be set") {
		t.Errorf("patch setting a node's patch: %v", err)
	}
	// A node's iteration and attempts are 32-bit: one whose next iteration
	// could not be committed would run its agent again and again.
	for _, ns := range []pipeline.NodeState{{Status: "pending", Iteration: math.MaxInt32}, {Status: "pending", Attempts: -1}} {
		_, err = b.eng.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: 1, Patch: &runstate.State{Nodes: map[string]pipeline.NodeState{"two": ns}}})
		if !errors.As(err, &inv) || !contains(err.Error(), "must be from 0 to 2147483646") {
			t.Errorf("patch with iteration %d, attempts %d: %v", ns.Iteration, ns.Attempts, err)
		}
	}
	_, err = b.eng.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: 99})
	if !errIs(err, engine.ErrNotFound) {
		t.Errorf("fork from a missing checkpoint: %v", err)
	}
	_, err = b.eng.Cancel(ctx, run.ID)
	if !errIs(err, engine.ErrConflict) {
		t.Errorf("cancelling a finished run: %v", err)
	}
	var _ store.Run
}

// A run whose pipeline changed since it started is not resumed under the new
// definition unless the caller asks to migrate.
func TestResumeRefusesAChangedPipeline(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	run := start(t, b.eng, "approval", nil)
	v := waitStatus(t, b.eng, run.ID, runstate.RunWaiting)

	changed := fstest.MapFS{"approval.yaml": {Data: []byte(strings.Replace(string(testPipelines["approval.yaml"].Data),
		"publish with", "publish (v2) with", 1))}}
	cat := enginetest.CatalogOf(t, changed)
	// The replica is replaced by one that loaded the new definition.
	if err := b.eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	other := startEngine(t, b.pool, cat, map[pipeline.Via]executor.Executor{pipeline.ViaMesh: b.exec}, "v2")
	req := engine.ResumeRequest{InterruptID: v.Interrupts[0].ID, Value: json.RawMessage(`"ok"`)}
	if _, err := other.Resume(ctx, req); !errIs(err, engine.ErrPipelineChanged) || !contains(err.Error(), "migrate") {
		t.Fatalf("resume under a changed definition: %v, want ErrPipelineChanged", err)
	}
	if v2, _ := b.eng.GetRun(ctx, run.ID); v2.Status != runstate.RunWaiting || v2.Interrupts[0].Status != "pending" {
		t.Fatalf("the refused resume changed the run: %s, %s", v2.Status, v2.Interrupts[0].Status)
	}
	req.Migrate = true
	if _, err := other.Resume(ctx, req); err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, other, run.ID, runstate.RunSucceeded)
	if v.PipelineHash != mustLookup(t, cat, "approval").Hash() {
		t.Errorf("the migrated run records hash %s", v.PipelineHash)
	}
}

func mustLookup(t *testing.T, cat *pipeline.Catalog, name string) *pipeline.Pipeline {
	t.Helper()
	p, ok := cat.Lookup(name)
	if !ok {
		t.Fatalf("no pipeline %s", name)
	}
	return p
}

// A run parked because its pipeline changed under it is resumed with
// migrate: its node runs although River still remembers the node's first
// job as completed.
func TestResumeParkedRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	if err := b.eng.Stop(ctx); err != nil { // this replica has the old definition
		t.Fatal(err)
	}
	run := start(t, b.eng, "linear", map[string]any{"task": "x"})

	changed := fstest.MapFS{"linear.yaml": {Data: []byte(strings.Replace(string(testPipelines["linear.yaml"].Data), `"one: `, `"one (v2): `, 1))}}
	cat := enginetest.CatalogOf(t, changed)
	v2 := startEngine(t, b.pool, cat, map[pipeline.Via]executor.Executor{pipeline.ViaMesh: b.exec}, "v2")
	v := waitStatus(t, v2, run.ID, runstate.RunFailed)
	if !contains(v.Error, "changed since the run started") {
		t.Fatalf("parked run's error %q", v.Error)
	}
	if _, err := v2.Resume(ctx, engine.ResumeRequest{RunID: run.ID}); !errIs(err, engine.ErrPipelineChanged) {
		t.Fatalf("resume without migrate: %v", err)
	}
	if _, err := v2.Resume(ctx, engine.ResumeRequest{RunID: run.ID, Migrate: true}); err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, v2, run.ID, runstate.RunSucceeded)
	if got := v.Outputs["three"]; got != "a: three: b: two: a: one (v2): x" {
		t.Errorf("output %q", got)
	}
}

// An approval whose run failed elsewhere waits again, with an interrupt
// that can be resumed, once the run is resumed.
func TestApprovalSurvivesAFailedRun(t *testing.T) {
	t.Parallel()
	cat := enginetest.CatalogOf(t, fstest.MapFS{"gate.yaml": {Data: []byte(`
name: gate
roles:
  a: {via: mesh, repository: a}
nodes:
  - {id: draft, role: a, task: draft}
  - {id: approve, type: approval, needs: [draft]}
  - {id: deploy, role: a, needs: [draft], task: deploy}
`)}})
	var fails atomic.Int32
	ex := &enginetest.InstantExecutor{Record: true, Reply: func(r executor.Request) (string, error) {
		if r.NodeID == "deploy" && fails.Add(1) == 1 {
			return "", errors.New("deploy broke")
		}
		return "ok", nil
	}}
	pool := pgtest.Pool(t)
	ctx := context.Background()
	eng := startEngine(t, pool, cat, map[pipeline.Via]executor.Executor{pipeline.ViaMesh: ex}, "gate")
	run := start(t, eng, "gate", nil)
	v := waitStatus(t, eng, run.ID, runstate.RunFailed)
	if v.Interrupts[0].Status != "cancelled" {
		t.Fatalf("the failed run's interrupt is %s", v.Interrupts[0].Status)
	}
	if _, err := eng.Resume(ctx, engine.ResumeRequest{InterruptID: v.Interrupts[0].ID, Value: json.RawMessage(`"yes"`)}); !errIs(err, engine.ErrConflict) {
		t.Fatalf("approving in a failed run: %v, want ErrConflict", err)
	}
	if _, err := eng.Resume(ctx, engine.ResumeRequest{RunID: run.ID}); err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, eng, run.ID, runstate.RunWaiting)
	if v.Interrupts[0].Status != "pending" {
		t.Fatalf("after the resume the interrupt is %s, want pending", v.Interrupts[0].Status)
	}
	if _, err := eng.Resume(ctx, engine.ResumeRequest{InterruptID: v.Interrupts[0].ID, Value: json.RawMessage(`"yes"`)}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, eng, run.ID, runstate.RunSucceeded)
}

// Agent output is untrusted: a NUL character (which Postgres stores in
// neither text nor jsonb) is replaced, not allowed to fail every commit;
// a NUL in a caller's input is refused.
func TestNULCharacters(t *testing.T) {
	t.Parallel()
	b := setup(t, func(r executor.Request) (string, error) {
		if r.NodeID == "two" {
			return "", errors.New("bad\x00error")
		}
		return "out\x00put", nil
	})
	ctx := context.Background()
	run := start(t, b.eng, "linear", map[string]any{"task": "x"})
	v := waitStatus(t, b.eng, run.ID, runstate.RunFailed)
	if v.Outputs["one"] != "out\uFFFDput" {
		t.Errorf("one's output %q", v.Outputs["one"])
	}
	if !contains(v.Error, "bad\uFFFDerror") {
		t.Errorf("run error %q", v.Error)
	}
	var inv *engine.InvalidError
	if _, err := b.eng.StartRun(ctx, engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "a\x00b"}}); !errors.As(err, &inv) {
		t.Errorf("an input with NUL: %v, want invalid", err)
	}
}

// A node's timeout cancels its executor call; the attempt fails with the
// deadline.
func TestNodeTimeout(t *testing.T) {
	t.Parallel()
	cat := enginetest.CatalogOf(t, fstest.MapFS{"slow.yaml": {Data: []byte(`
name: slow
roles:
  a: {via: mesh, repository: a}
nodes:
  - {id: wait, role: a, task: wait, timeout: 200ms}
`)}})
	pool := pgtest.Pool(t)
	ex := &enginetest.InstantExecutor{Record: true}
	release := ex.Hold("") // every call, until its context ends
	defer release()
	eng := startEngine(t, pool, cat, map[pipeline.Via]executor.Executor{pipeline.ViaMesh: ex}, "slow")
	run := start(t, eng, "slow", nil)
	v := waitStatus(t, eng, run.ID, runstate.RunFailed)
	if !contains(v.Error, "deadline exceeded") {
		t.Errorf("run error %q, want the deadline", v.Error)
	}
	if len(ex.Calls()) == 0 {
		t.Error("the executor was never called")
	}
}
