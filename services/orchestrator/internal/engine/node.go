package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/meshwork/meshwork/pkg/meshtype"
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

// Work works the job's node and then, while each node it commits makes
// exactly one agent node ready and no other node of the run is under way
// here, goes on with that node itself (inline), keeping the run's lease: a
// linear pipeline does not wait for River to hand out each step, and the
// step inserts no job for it. The commit that hands a node over records
// the job it would have had in the run's row (inline_job), in the statement
// that moves the run's head, and the node's own commit clears it. If this
// replica stops or dies before that, whoever claims the run's lease afresh
// schedules the recorded job (see scheduleInline): a takeover job of the
// reaper, or River retrying the job this goroutine started from.
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
	return e.workChain(ctx, lease, sessionKnown, a, job.ID, false)
}

// workChain works node a (its key taken, a reference on the run's lease
// held) and then each successor its commit hands over, until a commit hands
// none over or a node does not commit. inline says whether a has no job of
// its own (jobID 0): then, if it does not commit, it gets one.
func (e *Engine) workChain(ctx context.Context, lease store.Lease, sessionKnown bool, a nodeArgs, jobID int64, inline bool) error {
	for {
		next, held, err := e.workNodeRecovering(ctx, lease, sessionKnown, a, jobID)
		e.leases.end(a.key())
		if held {
			e.leases.release(ctx, a.RunID)
		}
		if inline && (err != nil || held) {
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
		a, jobID, sessionKnown, inline = next.args, 0, true, true
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
		if err := e.workChain(e.chains.ctx, lease, sessionKnown, a, 0, true); err != nil && !errors.Is(err, context.Canceled) {
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

// prepare loads the run's state and decides whether the job has work to do.
func (e *Engine) prepare(ctx context.Context, run store.Run, a nodeArgs) (*pipeline.Pipeline, runstate.State, error) {
	if run.Status != runstate.RunRunning && run.Status != runstate.RunWaiting {
		return nil, runstate.State{}, errNodeDone
	}
	p, ok := e.catalog.Lookup(run.Pipeline)
	if !ok || p.Hash() != run.PipelineHash {
		msg := fmt.Sprintf("pipeline %s changed since the run started (or is no longer in the catalog): resume the run with migrate to run it under the new definition", run.Pipeline)
		if err := e.parkChanged(ctx, run.ID, msg); err != nil {
			return nil, runstate.State{}, err
		}
		return nil, runstate.State{}, errNodeDone
	}
	st, err := e.stateAt(ctx, e.pool, run.ID, run.HeadSeq)
	if err != nil {
		return nil, runstate.State{}, err
	}
	if st.Node(a.NodeID).Iteration >= a.Iteration {
		return nil, runstate.State{}, errNodeDone // committed already (a duplicate or late job)
	}
	return p, st, nil
}

// parkChanged fails a run whose pipeline changed under it; ResumeRun with
// migrate continues it.
func (e *Engine) parkChanged(ctx context.Context, runID, msg string) error {
	return pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		run, err := store.LockRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		if run.Status != runstate.RunRunning && run.Status != runstate.RunWaiting {
			return nil
		}
		if err := store.CancelInterrupts(ctx, tx, runID); err != nil {
			return err
		}
		return store.UpdateRun(ctx, tx, runID, store.RunUpdate{HeadSeq: run.HeadSeq, Status: runstate.RunFailed, Error: msg})
	})
}

func (e *Engine) stateAt(ctx context.Context, q store.Querier, runID string, seq int) (runstate.State, error) {
	if st, ok := e.cache.get(runID, seq); ok {
		return st, nil
	}
	st, err := store.LoadState(ctx, q, runID, seq)
	if err != nil {
		return runstate.State{}, err
	}
	e.cache.put(runID, seq, st.Clone())
	return st, nil
}

// nodeResult is what one attempt produced.
type nodeResult struct {
	// task is what the attempt was asked (its rendered task, or its
	// command; a foreach node's items' are not kept), recorded with it,
	// already bounded.
	task    string
	output  string
	patch   string
	session string
	role    string
	cost    float64
}

// execute runs one attempt of an agent node: its task rendered over the
// run's state, through its role's executor, resuming the role's session.
// session is the role's session when sessionKnown (read with the lease).
func (e *Engine) execute(ctx context.Context, run store.Run, p *pipeline.Pipeline, st runstate.State, a nodeArgs, fence int64, session string, sessionKnown bool) (nodeResult, error) {
	n, ok := p.Node(a.NodeID)
	if !ok {
		return nodeResult{}, fmt.Errorf("pipeline %s has no node %q", p.Name(), a.NodeID)
	}
	role, _ := p.Role(a.NodeID)
	res := nodeResult{role: n.Role}
	ex := e.cfg.Executors[role.Via]
	if ex == nil {
		return res, fmt.Errorf("%w: role %s works via %s; start the orchestrator with --%s-url", executor.ErrUnavailable, n.Role, role.Via, role.Via)
	}
	if n.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(n.Timeout))
		defer cancel()
	}
	req := executor.Request{
		RunID: run.ID, NodeID: a.NodeID, Iteration: a.Iteration, Attempt: a.Attempt, Thread: run.Thread,
		RoleName: n.Role, Role: role, Timeout: time.Duration(role.Timeout) * time.Millisecond,
		Command: n.Command,
	}
	ps := st.Pipeline()
	req.Source = nodeSource(p, ps, a.NodeID)
	if n.IsForeach() {
		out, err := e.executeItems(ctx, p, n, ps, ex, req)
		res.output = out
		if err == nil {
			res.output, err = p.RenderOutput(a.NodeID, ps, out)
		}
		return res, err
	}
	var (
		task string
		err  error
	)
	if len(n.Command) == 0 { // a command node runs its command, not a task
		if task, err = p.RenderTask(a.NodeID, ps); err != nil {
			return res, err
		}
		res.task = truncate(scrub(task), maxAttemptTask)
	} else {
		res.task = truncate(scrub(strings.Join(n.Command, " ")), maxAttemptTask)
	}
	if !sessionKnown {
		if session, err = store.RoleSession(ctx, e.pool, run.Thread, n.Role); err != nil {
			return res, err
		}
	}
	req.Task, req.SessionID = task, session
	var saveMu sync.Mutex
	saved := session
	req.OnSession = func(id string) {
		// Saved the moment the agent names it: a crash in the middle of
		// the node then resumes this session rather than starting over.
		saveMu.Lock()
		defer saveMu.Unlock()
		if id == "" || id == saved {
			return
		}
		// Bounded: the agent's progress waits on this (the MCP client
		// delivers notifications one at a time).
		saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := store.SaveRoleSession(saveCtx, e.pool, run.Thread, n.Role, id, run.ID, a.NodeID, e.cfg.ReplicaID, fence); err != nil {
			e.logger.WarnContext(ctx, "saving a role's session failed", slog.String("run", run.ID), slog.Any("error", err))
			return
		}
		saved = id
	}
	var events atomic.Int64
	req.OnEvent = func(ev meshtype.AgentEvent) {
		// What the agent does, for watchers; bounded per attempt, and
		// bounded in time: the agent's progress waits on this.
		if events.Add(1) > maxAgentEvents {
			return
		}
		saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := store.AddAgentEvent(saveCtx, e.pool, run.ID, a.NodeID, ev); err != nil {
			e.logger.WarnContext(ctx, "recording an agent event failed", slog.String("run", run.ID), slog.Any("error", err))
		}
	}
	r, err := ex.Execute(ctx, req)
	r.Output, r.SessionID = scrub(r.Output), scrub(r.SessionID)
	res.session, res.cost, res.patch = r.SessionID, r.CostUSD, scrub(r.Patch)
	if res.session == "" {
		res.session = saved
	}
	if err != nil {
		res.output = r.Output
		return res, err
	}
	res.output, err = p.RenderOutput(a.NodeID, ps, r.Output)
	return res, err
}

// maxAttemptTask bounds the task recorded with an attempt, in bytes.
const maxAttemptTask = 16 << 10

// maxAgentEvents bounds the agent events recorded for one attempt.
const maxAgentEvents = 5000

// nodeSource resolves a node's source for its executor: the repository
// input's value, or the from node's role and patch.
func nodeSource(p *pipeline.Pipeline, ps pipeline.State, id string) *executor.Source {
	src := p.Source(id)
	switch {
	case src == nil:
		return nil
	case src.Input != "":
		repo, _ := ps.Inputs[src.Input].(map[string]any)
		return &executor.Source{Repository: repo}
	}
	from, _ := p.Node(src.From)
	role, _ := p.Role(src.From)
	out := &executor.Source{FromRole: from.Role, FromWorker: role.Worker, Patch: ps.Nodes[src.From].Patch}
	if fromSrc := p.Source(src.From); fromSrc != nil && fromSrc.Input != "" {
		out.FromRepository, _ = ps.Inputs[fromSrc.Input].(map[string]any)
	}
	return out
}

// executeItems runs a foreach node's items, at most MaxConcurrency at once,
// each in a session of its own; the node's result is the JSON array of the
// items' outputs, in item order.
func (e *Engine) executeItems(ctx context.Context, p *pipeline.Pipeline, n *pipeline.Node, ps pipeline.State, ex executor.Executor, base executor.Request) (string, error) {
	items, err := p.ForeachItems(n.ID, ps)
	if err != nil {
		return "", err
	}
	outs := make([]string, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(n.MaxConcurrency, 1))
	for i, item := range items {
		g.Go(func() error {
			task, err := p.RenderItemTask(n.ID, ps, i, item)
			if err != nil {
				return err
			}
			req := base
			req.Task, req.Item = task, fmt.Sprintf("%s/%d", n.ID, i)
			r, err := ex.Execute(gctx, req)
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			outs[i] = scrub(r.Output)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	b, err := json.Marshal(outs)
	return string(b), err
}

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
// A step that needs no River job, decided over the run as this job last
// saw it, commits in one round trip (commitGuarded); otherwise, or when
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
		Task: res.task,
	}
	saveSession := func() error {
		_, err := store.SaveRoleSession(ctx, &c.batch, in.run.Thread, res.role, res.session, a.RunID, a.NodeID, e.cfg.ReplicaID, in.fence)
		return err
	}
	var step runstate.Step
	if in.execErr != nil {
		attempt.Status, attempt.Error = "failed", truncate(scrub(in.execErr.Error()), 4000)
		retry := nodeRetry(p, a.NodeID)
		if a.Attempt < retry.MaxAttempts {
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
		step = runstate.Fail(st, a.NodeID, a.Iteration, a.Attempt, res.output, truncate(scrub(in.execErr.Error()), 4000))
		c.outcome = outcomeFailed
	} else {
		step = runstate.CompleteWithPatch(p, st, a.NodeID, a.Iteration, a.Attempt, res.output, res.patch)
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
	if err := store.InsertCheckpoint(ctx, batch, store.Checkpoint{RunID: w.RunID, Seq: w.Seq, ParentRun: w.RunID, ParentSeq: &parent, NodeID: w.NodeID, Iteration: w.Iteration, Delta: w.Step.Delta}); err != nil {
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
		SetInline: w.Inline != nil, WorkedNode: w.NodeID, WorkedIteration: w.Iteration,
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

func nodeRetry(p *pipeline.Pipeline, id string) pipeline.Retry {
	if n, ok := p.Node(id); ok && n.Retry != nil {
		return *n.Retry
	}
	return pipeline.Retry{MaxAttempts: 1}
}

// scrub replaces NUL characters, which Postgres stores in neither text nor
// jsonb, in what an agent sent: its output is untrusted, and must not make
// a commit fail for ever.
func scrub(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut at a character's start: Postgres refuses text that is not UTF-8.
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
