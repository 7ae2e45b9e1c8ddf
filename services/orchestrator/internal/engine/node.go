package engine

// A node's job: River's job args, its worker, and the chains that work a
// run's nodes one after another on one replica.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// nodeArgs is the River job of one attempt of one iteration of one node.
// River refuses a second job with the same args, so scheduling is
// idempotent; a takeover job names the job of a dead replica it replaces.
type nodeArgs struct {
	RunID     string `json:"run_id" river:"unique"`
	NodeID    string `json:"node_id" river:"unique"`
	Iteration int    `json:"iteration" river:"unique"`
	Attempt   int    `json:"attempt" river:"unique"`
	// Seq is the checkpoint whose commit scheduled the node: a node
	// scheduled again (a resumed run, an approval after a park) gets a new
	// job even though River still remembers the old one as completed.
	Seq      int   `json:"seq" river:"unique"`
	Takeover int64 `json:"takeover,omitempty" river:"unique"`
	// Role is the node's role, so that claiming the run's lease also reads
	// the role's session.
	Role string `json:"role,omitempty"`
	// NotBefore delays a retry whose backoff is shorter than River's
	// scheduler interval (which promotes scheduled jobs only every few
	// seconds): the job is available at once and waits itself.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// schedulerInterval is how often River's scheduler makes scheduled jobs
// available (River's default); shorter backoffs wait in the job instead.
const schedulerInterval = 5 * time.Second

// slotRetry is when a job that found every slot taken is tried again (at
// River's next scheduler pass after it).
const slotRetry = time.Second

func (nodeArgs) Kind() string { return "meshwork_node" }

func (nodeArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type nodeWorker struct {
	river.WorkerDefaults[nodeArgs]
	e *Engine
}

// errNodeDone ends a job whose node needs nothing more from it.
var errNodeDone = errors.New("node needs no work")

func (a nodeArgs) key() string { return fmt.Sprintf("%s/%s/%d", a.RunID, a.NodeID, a.Iteration) }

// inlineNext is a successor the job goes on with itself.
type inlineNext struct {
	args nodeArgs
	// session is its role's session, read in the commit's transaction.
	session string
	// headSeq is the run's head after the commit that made it ready.
	headSeq int
}

// Work takes one of the engine's slots, the node's key and the run's lease,
// then works the job's node and the successors handed over to it
// (workChain).
func (w *nodeWorker) Work(ctx context.Context, job *river.Job[nodeArgs]) error {
	e, a := w.e, job.Args
	if a.NotBefore != nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(*a.NotBefore)):
		}
	}
	// One of the engine's slots, shared with its chains (see startChain):
	// River's own bound does not count those. With none free the job goes
	// back to the queue, for this replica or another, rather than wait
	// here: a job waiting here would look like a dead replica's to the
	// reaper.
	select {
	case e.chains.slots <- struct{}{}:
		defer func() { <-e.chains.slots }()
	default:
		return river.JobSnooze(slotRetry)
	}
	// One goroutine per node iteration on this replica: a job whose node
	// another goroutine works on (inline, or River rescuing a long node's
	// job) waits for it, and is done if it committed.
	key := a.key()
	for !e.leases.begin(key) {
		if err := e.leases.await(ctx, key); err != nil {
			return err
		}
	}
	if e.leases.isCommitted(key) {
		e.leases.end(key)
		return nil
	}
	lease, sessionKnown, ok, err := e.leases.claim(ctx, a.RunID, a.Role)
	if err != nil || !ok {
		e.leases.end(key)
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil // the run was deleted
	}
	if err != nil {
		return err
	}
	if !ok {
		// Another replica works on this run: try again once it is done.
		return river.JobSnooze(e.cfg.LeaseTTL / 5)
	}
	if !sessionKnown {
		lease.Session = ""
	} else if err := e.scheduleInline(ctx, lease); err != nil {
		// A fresh claim: nobody works the run, so a node left inline by
		// its last holder has no worker until it has a job.
		e.leases.end(key)
		e.leases.release(ctx, a.RunID)
		return err
	}
	return e.workChain(ctx, lease, sessionKnown, a, job.ID)
}

// workChain works node a (its key taken, a reference on the run's lease
// held) and then, while each node it commits makes exactly one agent node
// ready and no other node of the run is under way here, goes on with that
// node itself (inline), keeping the run's lease: a linear pipeline does not
// wait for River to hand out each step, and the step inserts no job for
// it. The commit that hands a node over records the job it would have had
// in the run's row (inline_job), in the statement that moves the run's
// head, and the node's own commit clears it. If this replica stops or dies
// before that, whoever claims the run's lease afresh schedules the recorded
// job (see scheduleInline): a takeover job of the reaper, or River retrying
// the job this goroutine started from. A node with no job of its own
// (jobID 0: handed over, or a new run's first) that does not commit gets
// its job at once.
func (e *Engine) workChain(ctx context.Context, lease store.Lease, sessionKnown bool, a nodeArgs, jobID int64) error {
	for {
		next, held, err := e.workNodeRecovering(ctx, lease, sessionKnown, a, jobID)
		e.leases.end(a.key())
		if held {
			e.leases.release(ctx, a.RunID)
		}
		if jobID == 0 && (err != nil || held) {
			// An inline node that did not commit gets its job now, for
			// River to hand out here or elsewhere; if that fails, the next
			// fresh claim of the run schedules it from inline_job.
			e.giveUpInline(ctx, a)
		}
		if err != nil || next == nil {
			return err
		}
		// The successor's key was taken in the commit, and the lease kept.
		// An inline node has no job of its own (its attempt records none);
		// its role's session was read by the commit.
		a, jobID, sessionKnown = next.args, 0, true
		lease.Session = next.session
		lease.Run.HeadSeq, lease.Run.Status = next.headSeq, runstate.RunRunning
	}
}

// startChain works the first node of a run this replica just created with
// its lease (see createRun) in a goroutine of the engine's, as a chain that
// goes on with each successor handed over: the node waits for no River
// hand-out, and has no job. Its slot was acquired, its key taken and the
// lease's reference adopted by the caller. If this replica stops or dies
// before the node commits, the node gets its job as any inline node does
// (giveUpInline, or the run's inline_job once the lease expires).
func (e *Engine) startChain(lease store.Lease, sessionKnown bool, a nodeArgs) {
	go func() {
		defer e.chains.done()
		defer func() {
			// As River does for its jobs: a panic outside a node's work
			// (which workNodeRecovering turns into a failure) is logged,
			// and the run's lease expires.
			if p := recover(); p != nil {
				e.logger.ErrorContext(e.chains.ctx, "a chain panicked", slog.String("run", a.RunID), slog.String("node", a.NodeID), slog.Any("panic", p))
			}
		}()
		if err := e.workChain(e.chains.ctx, lease, sessionKnown, a, 0); err != nil && !errors.Is(err, context.Canceled) {
			e.logger.WarnContext(e.chains.ctx, "a run's first node did not commit here; it has a job now", slog.String("run", a.RunID), slog.String("node", a.NodeID), slog.Any("error", err))
		}
	}()
}

// giveUpInline inserts the job of an inline node this goroutine stopped
// working without committing it (the replica is stopping, the run was
// taken over or its commit failed). River refuses it if the job exists
// already (unique args).
func (e *Engine) giveUpInline(ctx context.Context, a nodeArgs) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := e.river.Insert(ctx, a, nil); err != nil {
		e.logger.WarnContext(ctx, "scheduling an inline node failed; the run's next claim schedules it", slog.String("run", a.RunID), slog.String("node", a.NodeID), slog.Any("error", err))
	}
}

// scheduleInline inserts the job of the node the run's last holder worked
// inline (lease.InlineJob), after a fresh claim of its lease: that holder
// died or stopped before the node's commit, and the node has no job of its
// own. A live holder would still hold the lease, so nobody else works the
// node. River refuses the job if it exists already (unique args), and a
// job whose node is committed ends at once.
func (e *Engine) scheduleInline(ctx context.Context, lease store.Lease) error {
	if len(lease.InlineJob) == 0 || (lease.Run.Status != runstate.RunRunning && lease.Run.Status != runstate.RunWaiting) {
		return nil
	}
	_, err := e.insertInlineJob(ctx, lease.InlineJob)
	return err
}

// insertInlineJob inserts a run's recorded inline job (runs.inline_job) and
// reports whether River took it (it refuses one it has: unique args). A
// record that does not decode is logged and skipped: no retry mends it.
func (e *Engine) insertInlineJob(ctx context.Context, job []byte) (bool, error) {
	var a nodeArgs
	if err := json.Unmarshal(job, &a); err != nil || a.RunID == "" {
		e.logger.ErrorContext(ctx, "a run's inline job does not decode; ignored", slog.String("job", string(job)), slog.Any("error", err))
		return false, nil
	}
	r, err := e.river.Insert(ctx, a, nil)
	if err != nil {
		return false, fmt.Errorf("scheduling the inline node %s of run %s: %w", a.NodeID, a.RunID, err)
	}
	if r.UniqueSkippedAsDuplicate {
		return false, nil
	}
	e.logger.InfoContext(ctx, "scheduled a node its replica left inline", slog.String("run", a.RunID), slog.String("node", a.NodeID))
	return true, nil
}

// workNodeRecovering is workNode with a panic turned into the node's
// failure to commit: the lease reference is then released and an inline
// node given its job, rather than leaked with the goroutine (River
// recovers the panic, but the lease would be renewed for ever).
func (e *Engine) workNodeRecovering(ctx context.Context, lease store.Lease, sessionKnown bool, a nodeArgs, jobID int64) (next *inlineNext, held bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			e.logger.ErrorContext(ctx, "a node's work panicked", slog.String("run", a.RunID), slog.String("node", a.NodeID), slog.Any("panic", p))
			next, held, err = nil, true, fmt.Errorf("node %s panicked: %v", a.NodeID, p)
		}
	}()
	return e.workNode(ctx, lease, sessionKnown, a, jobID)
}

// workNode works one node while holding a reference on the run's lease. held
// reports whether the caller must still release that reference; next is
// the successor to go on with (its key taken, the reference kept for it).
//
// The attempt runs in a span of the run's trace (see startNodeSpan), so the
// calls to the executor, the database queries of its commit and its log
// lines belong to the run's trace whichever replica works it.
func (e *Engine) workNode(ctx context.Context, lease store.Lease, sessionKnown bool, a nodeArgs, jobID int64) (next *inlineNext, held bool, err error) {
	log := e.logger.With(slog.String("run", a.RunID), slog.String("node", a.NodeID), slog.Int("iteration", a.Iteration), slog.Int("attempt", a.Attempt))
	run := lease.Run
	if a.Seq > run.HeadSeq {
		// The lease was this replica's already, with the run as it was
		// claimed: the commit that scheduled this node came after it
		// (another node's, worked at the same time), and its state is
		// what the node's task is made from.
		fresh, err := store.GetRun(ctx, e.pool, run.ID)
		if err != nil {
			return nil, true, err
		}
		run = fresh
	}
	p, st, err := e.prepare(ctx, run, a)
	if errors.Is(err, errNodeDone) {
		return nil, true, nil
	}
	if err != nil {
		return nil, true, err
	}

	knownSession := "" // read with the lease, or by the commit that handed the node over
	if sessionKnown {
		knownSession = lease.Session
	}
	ctx, span := startNodeSpan(ctx, run, p, a, knownSession)
	defer span.End()
	nodeCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	untrack := e.leases.track(a.RunID, &cancel)
	started := time.Now()
	res, execErr := e.execute(nodeCtx, run, p, st, a, lease.Fence, lease.Session, sessionKnown)
	untrack()
	if res.session != "" {
		span.SetAttributes(telemetry.AttrConversationID.String(res.session))
	}
	if ctx.Err() != nil {
		telemetry.Fail(span, ctx.Err(), "interrupted")
		return nil, true, ctx.Err() // this replica is stopping: River retries the job
	}
	if nodeCtx.Err() != nil {
		// Stopped by the heartbeat: the run was cancelled or taken over.
		// That is no failure of the node's; River retries the job, which
		// then finds the run cancelled, or the node done, or waits.
		log.InfoContext(ctx, "node stopped: the run was cancelled or another replica took it over")
		err := errors.New("node stopped: the run was cancelled or taken over")
		telemetry.Fail(span, err, "interrupted")
		return nil, true, err
	}
	if execErr != nil {
		telemetry.Fail(span, execErr, errorType(execErr))
	}

	err = e.leases.commit(a.RunID, func(fence int64, last bool) (bool, error) {
		var err error
		next, err = e.commitNode(ctx, run, p, a, jobID, fence, last, started, res, execErr)
		return next != nil, err
	})
	switch {
	case err == nil:
		return next, false, nil
	case errors.Is(err, errNodeDone):
		// Committed already by another job, or the run ended meanwhile.
		span.SetAttributes(attrNodeOutcome.String("superseded"))
		return nil, true, nil
	case errors.Is(err, store.ErrStaleLease):
		// Another replica took the run over; River retries this job, which
		// then finds the node done or waits for the run's lease.
		log.WarnContext(ctx, "the run was taken over: result not committed")
		telemetry.Fail(span, err, "stale_lease")
		return nil, true, err
	default:
		telemetry.Fail(span, err, "commit")
		return nil, true, err
	}
}

// retryable reports whether a failed attempt may pass if made again: not
// when the executor says the request itself was refused.
func retryable(err error) bool { return !errors.Is(err, executor.ErrRefused) }

func nodeRetry(p *pipeline.Pipeline, id string) pipeline.Retry {
	if n, ok := p.Node(id); ok && n.Retry != nil {
		return *n.Retry
	}
	return pipeline.Retry{MaxAttempts: 1}
}
