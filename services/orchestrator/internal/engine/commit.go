package engine

// A node's step: its checkpoint, the run's head and the successors' jobs,
// committed in one round trip when the run is where the step was decided,
// under the run's row lock otherwise.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/pgtext"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// commitNode commits an attempt's outcome in one transaction: on success the
// node's result, the new checkpoint, the role's session and the successor
// jobs; on a failure with attempts left the failed attempt and its retry
// job; on the last failure the failed node and the failed run.
//
// last says whether this job holds the replica's last reference on the
// run's lease. When the step makes exactly one agent node ready and no
// other node of the run is under way here (last), the commit keeps the
// lease and returns that node for the job to go on with; it inserts no job
// for it but records it in the run's inline_job, which that node's commit
// clears or replaces.
//
// A step that needs no River job, decided over the newest head this replica
// committed or read (the state cache's), commits in one round trip (commitGuarded); otherwise, or when
// the run moved on meanwhile, it commits under the run's row lock in an
// explicit transaction (commitLocked).
func (e *Engine) commitNode(ctx context.Context, run store.Run, p *pipeline.Pipeline, a nodeArgs, jobID int64, fence int64, last bool,
	started time.Time, res nodeResult, execErr error,
) (*inlineNext, error) {
	in := commitInput{run: run, p: p, a: a, jobID: jobID, fence: fence, last: last, started: started, res: res, execErr: execErr}
	commitStart := time.Now()
	c, err := e.commitGuarded(ctx, in)
	if errors.Is(err, errLockedCommit) {
		c, err = e.commitLocked(ctx, in)
	}
	if err != nil {
		if errors.Is(err, store.ErrDuplicateResult) {
			return nil, errNodeDone
		}
		e.cache.drop(a.RunID)
		return nil, err
	}
	e.cache.put(a.RunID, c.head, c.next)
	if c.outcome != outcomeRetry {
		e.leases.markCommitted(a.key())
	}
	trace.SpanFromContext(ctx).SetAttributes(attrNodeOutcome.String(c.outcome))
	e.onCommit(CommitInfo{
		RunID: a.RunID, Pipeline: p.Name(), NodeID: a.NodeID, Attempt: a.Attempt, Duration: commitStart.Sub(started),
		Status: c.outcome, RunStatus: c.runStatus, CommitDuration: time.Since(commitStart),
	})
	e.reportSkipped(ctx, p, a.RunID, a.NodeID, c.step)
	return c.successor, nil
}

// commitInput is what commitNode commits.
type commitInput struct {
	run     store.Run // as this job last saw it (its lease's, or the commit's that handed it over)
	p       *pipeline.Pipeline
	a       nodeArgs
	jobID   int64
	fence   int64
	last    bool
	started time.Time
	res     nodeResult
	execErr error
}

// commitPlan is an attempt's commit decided over the run's state at a head:
// the writes queued on batch, the River jobs it inserts, and what follows.
type commitPlan struct {
	batch store.Batch
	jobs  []river.InsertManyParams
	// successor is the node the job goes on with (its key taken: whoever
	// drops the plan ends it); its session is set once the run's sessions
	// are read (withSessions).
	successor *inlineNext
	// head and next are the run's head and state after the commit.
	head      int
	next      runstate.State
	outcome   string
	runStatus string
	// step is the committed step (zero for a retry), for its skipped nodes.
	step runstate.Step
}

// errLockedCommit sends a commit down the locked path.
var errLockedCommit = errors.New("the commit needs the run's row lock")

// drop ends the successor's key of a plan that is not committed.
func (e *Engine) drop(c *commitPlan) {
	if c != nil && c.successor != nil {
		e.leases.end(c.successor.args.key())
		c.successor = nil
	}
}

// withSessions sets the successor's session from the run's thread's
// sessions as the commit read them, or the one the commit saved for its
// role.
func (c *commitPlan) withSessions(in commitInput, sessions map[string]string) {
	if c.successor == nil {
		return
	}
	role := c.successor.args.Role
	c.successor.session = sessions[role]
	if role == in.res.role && in.res.session != "" {
		c.successor.session = in.res.session // saved by this commit
	}
}

// commitGuarded commits a step that inserts no River job without an
// explicit transaction, in one round trip (store.Batch.SendGuarded),
// decided over the run's head as this replica's cache holds it. errLockedCommit when the
// step needs River or the run moved on; nothing is written then.
func (e *Engine) commitGuarded(ctx context.Context, in commitInput) (*commitPlan, error) {
	// The run's head as this replica last committed it: a job that shares
	// the run's lease may have seen an older one. Nothing cached, nothing
	// guessed: the locked path reads the run.
	head, st, ok := e.cache.latest(in.run.ID)
	if !ok {
		return nil, errLockedCommit
	}
	c, err := e.planCommit(ctx, in, head, in.run.Status, st)
	if err != nil || len(c.jobs) > 0 {
		e.drop(c)
		if err == nil {
			err = errLockedCommit
		}
		return nil, err
	}
	sessions, err := c.batch.SendGuarded(ctx, e.pool, store.StepGuard{RunID: in.run.ID, Owner: e.cfg.ReplicaID, Fence: in.fence, Head: head})
	if err != nil {
		e.drop(c)
		if errors.Is(err, store.ErrRunMoved) {
			err = errLockedCommit
		}
		return nil, err
	}
	c.withSessions(in, sessions)
	return c, nil
}

// commitLocked commits under the run's row lock, in an explicit
// transaction with River's job inserts.
func (e *Engine) commitLocked(ctx context.Context, in commitInput) (*commitPlan, error) {
	var c *commitPlan
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		locked, sessions, err := store.LockRunForCommit(ctx, tx, in.a.RunID, e.cfg.ReplicaID, in.fence)
		if err != nil {
			return err
		}
		if locked.Status != runstate.RunRunning && locked.Status != runstate.RunWaiting {
			return errNodeDone // cancelled or ended while the node ran
		}
		st, err := e.stateAt(ctx, tx, in.a.RunID, locked.HeadSeq)
		if err != nil {
			return err
		}
		if c, err = e.planCommit(ctx, in, locked.HeadSeq, locked.Status, st); err != nil {
			return err
		}
		c.withSessions(in, sessions)
		if len(c.jobs) > 0 {
			if _, err := e.river.InsertManyTx(ctx, tx, c.jobs); err != nil {
				return fmt.Errorf("inserting the node's jobs: %w", err)
			}
		}
		return c.batch.Send(ctx, tx)
	})
	if err != nil {
		e.drop(c)
		return nil, err
	}
	return c, nil
}

// planCommit decides an attempt's commit over st, the run's state at head
// (its status status), and queues its writes.
func (e *Engine) planCommit(ctx context.Context, in commitInput, head int, status string, st runstate.State) (*commitPlan, error) {
	a, res, p := in.a, in.res, in.p
	if st.Node(a.NodeID).Iteration >= a.Iteration {
		return nil, errNodeDone // committed already
	}
	c := &commitPlan{head: head, next: st, outcome: outcomeSucceeded, runStatus: status}
	attempt := store.Attempt{
		RunID: a.RunID, NodeID: a.NodeID, Iteration: a.Iteration, Attempt: a.Attempt, JobID: in.jobID,
		Replica: e.cfg.ReplicaID, Status: "succeeded", SessionID: res.session, CostUSD: res.cost, StartedAt: in.started,
		Task: res.task, Journey: res.journey, ChangeDigest: res.changeDigest,
	}
	saveSession := func() error {
		_, err := store.SaveRoleSession(ctx, &c.batch, in.run.Thread, res.role, res.session, a.RunID, a.NodeID, e.cfg.ReplicaID, in.fence)
		return err
	}
	var step runstate.Step
	if in.execErr != nil {
		attempt.Status, attempt.Error = "failed", textcut.Clip(pgtext.Scrub(in.execErr.Error()), maxAttemptError, "…")
		retry := nodeRetry(p, a.NodeID)
		if a.Attempt < retry.MaxAttempts && retryable(in.execErr) {
			if err := store.InsertAttempt(ctx, &c.batch, attempt); err != nil {
				return nil, err
			}
			if res.session != "" {
				if err := saveSession(); err != nil {
					return nil, err
				}
			}
			retryArgs := nodeArgs{RunID: a.RunID, NodeID: a.NodeID, Iteration: a.Iteration, Attempt: a.Attempt + 1, Seq: a.Seq, Role: a.Role}
			at := time.Now().Add(retry.Delay(a.Attempt))
			opts := &river.InsertOpts{ScheduledAt: at}
			if retry.Delay(a.Attempt) < schedulerInterval {
				retryArgs.NotBefore, opts = &at, nil
			}
			c.jobs = append(c.jobs, river.InsertManyParams{Args: retryArgs, InsertOpts: opts})
			c.outcome = outcomeRetry
			// The retry has a job: the run's inline_job no longer stands
			// for the node.
			return c, store.UpdateRun(ctx, &c.batch, a.RunID, store.RunUpdate{
				HeadSeq: head, Status: status, Release: in.last, WorkedNode: a.NodeID, WorkedIteration: a.Iteration,
			})
		}
		step = runstate.Fail(st, a.NodeID, a.Iteration, a.Attempt, res.output, attempt.Error)
		c.outcome = outcomeFailed
	} else {
		step = runstate.CompleteWithPatch(p, st, a.NodeID, a.Iteration, a.Attempt, res.output, res.patch, res.patchOmits)
	}
	if res.session != "" && res.role != "" && st.Sessions[res.role] != res.session {
		step.Delta.Apply(runstate.SetSession(res.role, res.session))
		step.Next.Apply(runstate.SetSession(res.role, res.session))
		if err := saveSession(); err != nil {
			return nil, err
		}
	}
	if err := store.InsertAttempt(ctx, &c.batch, attempt); err != nil {
		return nil, err
	}
	c.head, c.next, c.runStatus, c.step = head+1, step.Next, step.Status, step
	// Go on with a lone successor in this job, when no other node of the
	// run is under way here (so inline_job stands for one node at most);
	// its key is taken before the commit.
	if id, ok := loneNode(step); ok && in.execErr == nil && in.last {
		na := scheduled(p, a.RunID, step, id, head+1)
		if e.leases.begin(na.key()) {
			c.successor = &inlineNext{args: na, headSeq: head + 1}
		}
	}
	w := stepWrite{RunID: a.RunID, Head: head, NodeID: a.NodeID, Iteration: a.Iteration, Step: step, Release: in.last && c.successor == nil}
	if c.successor != nil {
		w.Inline = &c.successor.args
	}
	jobs, err := e.queueStep(ctx, &c.batch, p, w)
	c.jobs = append(c.jobs, jobs...)
	return c, err
}

// stepWrite is what a step commits besides its checkpoint's content.
type stepWrite struct {
	RunID string
	// Head is the run's head the step follows; the step is checkpoint
	// Head+1 (queueStep) or, for queueAfterCheckpoint, Seq is written
	// already.
	Head int
	Seq  int
	// NodeID and Iteration name the node whose result the step is.
	NodeID    string
	Iteration int
	Step      runstate.Step
	// Release gives up the committer's lease with the step.
	Release bool
	// NewHash migrates the run to a changed pipeline definition.
	NewHash string
	// Inline is the successor the committer goes on with, recorded as the
	// run's inline_job; its job is not inserted. Nil: none.
	Inline *nodeArgs
}

// applyStep writes w.Step as checkpoint Head+1 (a child of Head) and does
// what it asks for (see queueAfterCheckpoint) in tx: the writes are queued
// on batch, which it sends.
func (e *Engine) applyStep(ctx context.Context, tx pgx.Tx, batch *store.Batch, p *pipeline.Pipeline, w stepWrite) error {
	jobs, err := e.queueStep(ctx, batch, p, w)
	if err != nil {
		return err
	}
	return e.sendStep(ctx, tx, batch, jobs)
}

// afterCheckpoint does what w.Step asks for in tx, its checkpoint (w.Seq)
// written already (see queueAfterCheckpoint), and sends batch.
func (e *Engine) afterCheckpoint(ctx context.Context, tx pgx.Tx, batch *store.Batch, p *pipeline.Pipeline, w stepWrite) error {
	jobs, err := e.queueAfterCheckpoint(ctx, batch, p, w)
	if err != nil {
		return err
	}
	return e.sendStep(ctx, tx, batch, jobs)
}

// sendStep inserts a step's jobs and sends its writes, in tx: every write
// of the step in one round trip besides River's insert.
func (e *Engine) sendStep(ctx context.Context, tx pgx.Tx, batch *store.Batch, jobs []river.InsertManyParams) error {
	if len(jobs) > 0 {
		if _, err := e.river.InsertManyTx(ctx, tx, jobs); err != nil {
			return fmt.Errorf("inserting the successor jobs: %w", err)
		}
	}
	return batch.Send(ctx, tx)
}

// queueStep queues w.Step as checkpoint Head+1 (a child of Head) and what
// it asks for (see queueAfterCheckpoint).
func (e *Engine) queueStep(ctx context.Context, batch *store.Batch, p *pipeline.Pipeline, w stepWrite) ([]river.InsertManyParams, error) {
	w.Seq = w.Head + 1
	parent := w.Head
	if err := store.InsertCheckpoint(ctx, batch, store.Checkpoint{RunID: w.RunID, Seq: w.Seq, ParentRun: w.RunID, ParentSeq: &parent, NodeID: w.NodeID, Iteration: w.Iteration, Delta: api.State(w.Step.Delta)}); err != nil {
		return nil, err
	}
	return e.queueAfterCheckpoint(ctx, batch, p, w)
}

// queueAfterCheckpoint queues the step's interrupts and the run's new head
// (w.Seq), status and inline_job on batch, and returns the jobs of the
// nodes it schedules (but w.Inline's), for the caller to insert in the
// step's transaction.
func (e *Engine) queueAfterCheckpoint(ctx context.Context, batch *store.Batch, p *pipeline.Pipeline, w stepWrite) ([]river.InsertManyParams, error) {
	step := w.Step
	for _, id := range step.Interrupts {
		if err := store.InsertInterrupt(ctx, batch, w.RunID, id, step.Next.Node(id).Iteration+1); err != nil {
			return nil, err
		}
	}
	var jobs []river.InsertManyParams
	for _, id := range step.Schedule {
		if w.Inline != nil && w.Inline.NodeID == id {
			continue
		}
		jobs = append(jobs, river.InsertManyParams{Args: scheduled(p, w.RunID, step, id, w.Seq)})
	}
	if step.Status != runstate.RunRunning && step.Status != runstate.RunWaiting {
		if err := store.CancelInterrupts(ctx, batch, w.RunID); err != nil {
			return nil, err
		}
	}
	u := store.RunUpdate{
		HeadSeq: w.Seq, Status: step.Status, Error: step.Error, Release: w.Release, PipelineHash: w.NewHash,
		WorkedNode: w.NodeID, WorkedIteration: w.Iteration,
	}
	if w.Inline != nil {
		job, err := json.Marshal(w.Inline)
		if err != nil {
			return nil, err
		}
		u.InlineJob = job
	}
	return jobs, store.UpdateRun(ctx, batch, w.RunID, u)
}

// scheduled is the first attempt of node id's next iteration, which step
// (checkpoint seq) made ready.
func scheduled(p *pipeline.Pipeline, runID string, step runstate.Step, id string, seq int) nodeArgs {
	n, _ := p.Node(id)
	return nodeArgs{RunID: runID, NodeID: id, Iteration: step.Next.Node(id).Iteration + 1, Attempt: 1, Seq: seq, Role: n.Role}
}

// loneNode is the one node step makes ready when it makes exactly one, opens
// no interrupt and leaves the run running: a node that can go on where the
// step was committed, without a River job.
func loneNode(step runstate.Step) (string, bool) {
	if len(step.Schedule) != 1 || len(step.Interrupts) != 0 || step.Status != runstate.RunRunning {
		return "", false
	}
	return step.Schedule[0], true
}
