package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// ErrNotFound is returned for an unknown run, checkpoint, interrupt or
// pipeline.
var ErrNotFound = store.ErrNotFound

// ErrConflict is returned for an operation the run's state does not allow,
// such as resuming an interrupt twice or cancelling a finished run.
var ErrConflict = errors.New("conflict")

// ErrPipelineChanged is returned when a run's pipeline definition changed
// since it started and the caller did not ask to migrate.
var ErrPipelineChanged = errors.New("the pipeline definition changed since the run started")

// InvalidError is bad input from a caller; its message says what to fix.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// StartRequest starts a run.
type StartRequest struct {
	// Pipeline names a pipeline of the catalog. Required.
	Pipeline string `json:"pipeline"`
	// Inputs are checked against the pipeline's inputs.
	Inputs map[string]any `json:"inputs,omitempty"`
	// Thread continues the role sessions of earlier runs on that thread;
	// empty starts a new thread (the run's id).
	Thread string `json:"thread,omitempty"`
	// Caller is recorded with the run.
	Caller string `json:"-"`
}

// StartRun starts a run: its first checkpoint and the jobs of its root nodes
// commit together.
func (e *Engine) StartRun(ctx context.Context, req StartRequest) (store.Run, error) {
	p, ok := e.catalog.Lookup(req.Pipeline)
	if !ok {
		var names []string
		for _, p := range e.catalog.Pipelines() {
			names = append(names, p.Name())
		}
		return store.Run{}, fmt.Errorf("pipeline %q: %w (known: %s)", req.Pipeline, ErrNotFound, strings.Join(names, ", "))
	}
	if err := checkNoNUL("inputs", req.Inputs); err != nil {
		return store.Run{}, err
	}
	inputs, err := p.CheckInputs(req.Inputs)
	if err != nil {
		return store.Run{}, invalid("%v", err)
	}
	if err := checkThread(req.Thread); err != nil {
		return store.Run{}, err
	}
	if err := e.checkThreadOwner(ctx, req.Thread); err != nil {
		return store.Run{}, err
	}
	id := uuid.NewString()
	thread := req.Thread
	if thread == "" {
		thread = id
	}
	step := runstate.Start(p, inputs)
	return e.createRun(ctx, p, step, store.NewRun{ID: id, Thread: thread, Caller: req.Caller}, nil, "")
}

// createRun inserts a new run with its first checkpoint (step's delta, over
// the checkpoint named by n's ForkedFrom fields for a fork), and does what
// the step asks for, in one transaction. sessions seed the run's thread
// (a fork's new thread); lockSource is a run whose checkpoints must
// outlive the transaction (a fork's source).
//
// The run keeps the trace context of ctx's span (the HTTP or MCP request
// that creates it): its nodes' spans continue that trace.
func (e *Engine) createRun(ctx context.Context, p *pipeline.Pipeline, step runstate.Step, n store.NewRun, sessions map[string]string, lockSource string) (store.Run, error) {
	n.Pipeline, n.PipelineHash, n.Status = p.Name(), p.Hash(), runstate.RunRunning
	if !trace.SpanContextFromContext(ctx).IsValid() {
		// No request span (the engine called directly): a span of the
		// run's own roots its trace, so that its nodes still share one.
		var root trace.Span
		ctx, root = telemetry.Tracer().Start(ctx, "create_run "+p.Name())
		defer root.End()
	}
	// The request's span says which run it created.
	trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrRunID.String(n.ID), telemetry.AttrPipeline.String(p.Name()))
	n.Traceparent, n.Tracestate = telemetry.TraceContext(ctx)
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if lockSource != "" {
			if err := store.ShareLockRun(ctx, tx, lockSource); err != nil {
				return err
			}
		}
		if _, err := store.InsertRun(ctx, tx, n); err != nil {
			return err
		}
		batch := &store.Batch{}
		if err := store.InsertCheckpoint(ctx, batch, store.Checkpoint{RunID: n.ID, Seq: 0, ParentRun: n.ForkedFromRun, ParentSeq: n.ForkedFromSeq, Delta: step.Delta}); err != nil {
			return err
		}
		if len(sessions) > 0 {
			if err := store.SeedRoleSessions(ctx, batch, n.Thread, n.ID, sessions); err != nil {
				return err
			}
		}
		return e.afterCheckpoint(ctx, tx, batch, p, stepWrite{RunID: n.ID, Seq: 0, Step: step})
	})
	if err != nil {
		return store.Run{}, err
	}
	e.cache.put(n.ID, 0, step.Next)
	e.reportSkipped(ctx, p, n.ID, "", step)
	return store.GetRun(ctx, e.pool, n.ID)
}

// checkNoNUL refuses a NUL character anywhere in a JSON value's strings
// (keys included): Postgres stores no NUL in text or jsonb.
func checkNoNUL(what string, v any) error {
	switch v := v.(type) {
	case string:
		if strings.ContainsRune(v, 0) {
			return invalid("%s must not contain NUL characters", what)
		}
	case map[string]any:
		for k, e := range v {
			if err := checkNoNUL(what, k); err != nil {
				return err
			}
			if err := checkNoNUL(what, e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range v {
			if err := checkNoNUL(what, e); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkThread(t string) error {
	if len(t) > 200 || strings.ContainsFunc(t, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return invalid("thread must be at most 200 characters, without control characters")
	}
	return nil
}

// PipelineSummary describes one pipeline of the catalog to callers.
type PipelineSummary struct {
	Name        string                    `json:"name"`
	Description string                    `json:"description,omitempty"`
	Inputs      map[string]pipeline.Input `json:"inputs"`
	// Hash identifies the pipeline's definition; a run records the hash it
	// started under.
	Hash string `json:"hash"`
}

// Pipelines describes the catalog's pipelines, by name.
func (e *Engine) Pipelines() []PipelineSummary {
	out := []PipelineSummary{}
	for _, p := range e.catalog.Pipelines() {
		d := p.Definition()
		inputs := d.Inputs
		if inputs == nil {
			inputs = map[string]pipeline.Input{}
		}
		out = append(out, PipelineSummary{Name: p.Name(), Description: d.Description, Inputs: inputs, Hash: p.Hash()})
	}
	return out
}

// NodeView is one node of a run as callers see it.
type NodeView struct {
	ID     string `json:"id"`
	Role   string `json:"role,omitempty"`
	Type   string `json:"type"`
	Status string `json:"status"`
	// Needs are the nodes this one waits for: the pipeline's edges.
	Needs []string `json:"needs,omitempty"`
	pipeline.NodeState
}

// RunView is a run with its state at its head.
type RunView struct {
	store.Run
	Inputs     map[string]any    `json:"inputs"`
	Nodes      []NodeView        `json:"nodes"`
	Outputs    map[string]string `json:"outputs"`
	Sessions   map[string]string `json:"sessions"`
	Interrupts []store.Interrupt `json:"interrupts"`
	Attempts   []store.Attempt   `json:"attempts,omitempty"`
	Loops      map[string]int    `json:"loops,omitempty"`
	// PatchNode and Patch are the run's patch: the change of the pipeline's
	// patch node (a git-format diff), once it has one.
	PatchNode string `json:"patch_node,omitempty"`
	Patch     string `json:"patch,omitempty"`
}

// GetRun returns a run with its state, its role sessions, its interrupts and
// its attempts.
func (e *Engine) GetRun(ctx context.Context, id string) (RunView, error) {
	run, err := e.loadVisible(ctx, id)
	if err != nil {
		return RunView{}, err
	}
	st, err := store.LoadState(ctx, e.pool, id, run.HeadSeq)
	if err != nil {
		return RunView{}, err
	}
	v := RunView{Run: run, Inputs: st.Inputs, Outputs: map[string]string{}, Loops: st.Loops}
	if v.Inputs == nil {
		v.Inputs = map[string]any{}
	}
	p, _ := e.catalog.Lookup(run.Pipeline)
	ready := map[string]bool{}
	if p != nil {
		for _, r := range runstate.Ready(p, st) {
			ready[r] = true
		}
		for _, id := range p.Order() {
			n, _ := p.Node(id)
			ns := st.Node(id)
			status := ns.Status
			if ready[id] && (run.Status == runstate.RunRunning || run.Status == runstate.RunWaiting) {
				status = pipeline.StatusRunning
			}
			v.Nodes = append(v.Nodes, NodeView{ID: id, Role: n.Role, Type: string(n.Type), Status: status, Needs: n.Needs, NodeState: ns})
		}
	}
	for id, ns := range st.Nodes {
		if ns.Status == pipeline.StatusSucceeded {
			v.Outputs[id] = ns.Output
		}
	}
	if p != nil {
		if v.PatchNode = p.PatchNode(); v.PatchNode != "" {
			v.Patch = st.Node(v.PatchNode).Patch
		}
	}
	if v.Sessions, err = store.ListRoleSessions(ctx, e.pool, run.Thread); err != nil {
		return RunView{}, err
	}
	if v.Interrupts, err = store.ListInterrupts(ctx, e.pool, id); err != nil {
		return RunView{}, err
	}
	if v.Attempts, err = store.ListAttempts(ctx, e.pool, id); err != nil {
		return RunView{}, err
	}
	return v, nil
}

// ListRuns lists runs, newest first.
func (e *Engine) ListRuns(ctx context.Context, f store.ListFilter) ([]store.Run, error) {
	f, ok := listFilter(ctx, f)
	if !ok {
		return []store.Run{}, nil
	}
	runs, err := store.ListRuns(ctx, e.pool, f)
	if errors.Is(err, store.ErrNotFound) {
		return nil, invalid("%v", err)
	}
	return runs, err
}

// Checkpoints lists a run's checkpoints: each one's delta and where it
// comes from.
func (e *Engine) Checkpoints(ctx context.Context, runID string) ([]store.Checkpoint, error) {
	if _, err := e.loadVisible(ctx, runID); err != nil {
		return nil, err
	}
	return store.ListCheckpoints(ctx, e.pool, runID)
}

// ForkRequest forks a run from one of its checkpoints.
type ForkRequest struct {
	// RunID and Seq name the checkpoint. Required.
	RunID string `json:"run_id"`
	Seq   int    `json:"seq"`
	// Patch changes the state before the fork runs: new inputs (checked
	// against the pipeline), node states (a node set to pending runs again).
	Patch *runstate.State `json:"patch,omitempty"`
	// Thread is the fork's thread; empty starts a new one that begins with
	// the role sessions of the checkpoint.
	Thread string `json:"thread,omitempty"`
	// Migrate runs the fork under the pipeline's current definition when it
	// changed since the run started.
	Migrate bool   `json:"migrate,omitempty"`
	Caller  string `json:"-"`
}

// Fork starts a new run from a checkpoint of another. The fork's first
// checkpoint is a delta (the patch) over the checkpoint it starts from:
// nothing is copied. The nodes ready at that checkpoint run again.
func (e *Engine) Fork(ctx context.Context, req ForkRequest) (store.Run, error) {
	src, err := e.loadVisible(ctx, req.RunID)
	if err != nil {
		return store.Run{}, err
	}
	p, err := e.pipelineFor(src, req.Migrate)
	if err != nil {
		return store.Run{}, err
	}
	if err := checkThread(req.Thread); err != nil {
		return store.Run{}, err
	}
	if err := e.checkThreadOwner(ctx, req.Thread); err != nil {
		return store.Run{}, err
	}
	at, err := store.LoadState(ctx, e.pool, req.RunID, req.Seq)
	if errors.Is(err, store.ErrNotFound) {
		return store.Run{}, fmt.Errorf("checkpoint %d of run %s: %w (list them with the run's checkpoints)", req.Seq, req.RunID, ErrNotFound)
	}
	if err != nil {
		return store.Run{}, err
	}
	patch := runstate.State{}
	if req.Patch != nil {
		if patch, err = checkPatch(p, *req.Patch); err != nil {
			return store.Run{}, err
		}
	}
	step := runstate.Fork(p, at, patch)
	id := uuid.NewString()
	thread := req.Thread
	if thread == "" {
		thread = id
	}
	// A fork is a new run, in the trace of the request that forks it; its
	// span links to the source run's trace.
	linkRunTrace(ctx, src)
	seq := req.Seq
	var sessions map[string]string
	if req.Thread == "" {
		sessions = step.Next.Sessions // a new thread starts where the checkpoint was
	}
	return e.createRun(ctx, p, step, store.NewRun{ID: id, Thread: thread, Caller: req.Caller, ForkedFromRun: src.ID, ForkedFromSeq: &seq}, sessions, src.ID)
}

// checkPatch refuses a state patch that names unknown nodes, bad statuses or
// bad inputs.
func checkPatch(p *pipeline.Pipeline, patch runstate.State) (runstate.State, error) {
	out := runstate.State{Nodes: patch.Nodes}
	if err := checkNoNUL("patch", patch.Inputs); err != nil {
		return runstate.State{}, err
	}
	for _, ns := range patch.Nodes {
		if err := checkNoNUL("patch", ns.Output); err != nil {
			return runstate.State{}, err
		}
	}
	if patch.Inputs != nil {
		in, err := p.CheckInputs(patch.Inputs)
		if err != nil {
			return runstate.State{}, invalid("patch: %v", err)
		}
		out.Inputs = in
	}
	for id, ns := range patch.Nodes {
		if _, ok := p.Node(id); !ok {
			return runstate.State{}, invalid("patch: pipeline %s has no node %q", p.Name(), id)
		}
		switch ns.Status {
		case pipeline.StatusPending, pipeline.StatusSucceeded, pipeline.StatusSkipped:
		default:
			return runstate.State{}, invalid("patch: node %s: status must be pending, succeeded or skipped, not %q", id, ns.Status)
		}
	}
	if len(patch.Loops) > 0 || len(patch.Sessions) > 0 {
		return runstate.State{}, invalid("patch: only inputs and nodes can be patched")
	}
	return out, nil
}

// pipelineFor returns the definition a run continues under: its own, or with
// migrate the catalog's current one.
func (e *Engine) pipelineFor(run store.Run, migrate bool) (*pipeline.Pipeline, error) {
	p, ok := e.catalog.Lookup(run.Pipeline)
	if !ok {
		return nil, fmt.Errorf("pipeline %q of run %s is no longer in the catalog: %w", run.Pipeline, run.ID, ErrNotFound)
	}
	if p.Hash() != run.PipelineHash && !migrate {
		return nil, fmt.Errorf("%w: run %s started under pipeline %s %.12s, the catalog now has %.12s; pass migrate to continue under the new definition",
			ErrPipelineChanged, run.ID, run.Pipeline, run.PipelineHash, p.Hash())
	}
	return p, nil
}

// ResumeRequest resumes an interrupt with a value, or a failed run.
type ResumeRequest struct {
	// InterruptID names the interrupt (an approval node waiting); Value is
	// the decision, which becomes the node's output (a string as is, other
	// JSON as its text).
	InterruptID string          `json:"interrupt_id,omitempty"`
	Value       json.RawMessage `json:"value,omitempty"`
	// RunID resumes a failed run instead: its failed node runs again.
	RunID string `json:"run_id,omitempty"`
	// Migrate continues the run under the pipeline's current definition if
	// it changed since the run started.
	Migrate bool `json:"migrate,omitempty"`
	// DecidedBy is recorded with the decision.
	DecidedBy string `json:"-"`
}

// Resume resumes an interrupt (an approval) with a value, recording the
// decision, or a failed run, whose failed nodes run again.
func (e *Engine) Resume(ctx context.Context, req ResumeRequest) (store.Run, error) {
	switch {
	case req.InterruptID != "" && req.RunID != "":
		return store.Run{}, invalid("give interrupt_id or run_id, not both")
	case req.InterruptID != "":
		return e.resumeInterrupt(ctx, req)
	case req.RunID != "":
		return e.resumeRun(ctx, req)
	default:
		return store.Run{}, invalid("interrupt_id (to resume an approval) or run_id (to resume a failed run) is required")
	}
}

func (e *Engine) resumeInterrupt(ctx context.Context, req ResumeRequest) (store.Run, error) {
	value, err := valueText(req.Value)
	if err != nil {
		return store.Run{}, err
	}
	var runID string
	runID, err = store.InterruptRun(ctx, e.pool, req.InterruptID)
	if err != nil {
		return store.Run{}, fmt.Errorf("interrupt %q: %w", req.InterruptID, err)
	}
	// What the commit did, reported once it is done.
	var (
		run  store.Run
		in   store.Interrupt
		p    *pipeline.Pipeline
		step runstate.Step
	)
	err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		// The run first, then the interrupt: the order of every writer.
		var err error
		run, err = store.LockRun(ctx, tx, runID)
		if err != nil {
			return err
		}
		in, err = store.LockInterrupt(ctx, tx, req.InterruptID)
		if err != nil {
			return fmt.Errorf("interrupt %q: %w", req.InterruptID, err)
		}
		if err := e.mayDecide(ctx, run, in); err != nil {
			return err
		}
		if in.Status != "pending" {
			return fmt.Errorf("%w: interrupt %s was already %s", ErrConflict, in.ID, in.Status)
		}
		if run.Status != runstate.RunRunning && run.Status != runstate.RunWaiting {
			return fmt.Errorf("%w: run %s is %s; resume the run first", ErrConflict, run.ID, run.Status)
		}
		p, err = e.pipelineFor(run, req.Migrate)
		if err != nil {
			return err
		}
		st, err := store.LoadState(ctx, tx, run.ID, run.HeadSeq)
		if err != nil {
			return err
		}
		if st.Node(in.NodeID).Status != pipeline.StatusWaiting {
			return fmt.Errorf("%w: node %s of run %s is not waiting", ErrConflict, in.NodeID, run.ID)
		}
		if err := store.ResolveInterrupt(ctx, tx, in.ID, "resumed", req.Value, req.DecidedBy); err != nil {
			return err
		}
		step = runstate.Approve(p, st, in.NodeID, value)
		newHash := ""
		if p.Hash() != run.PipelineHash {
			newHash = p.Hash()
		}
		return e.applyStep(ctx, tx, &store.Batch{}, p, stepWrite{RunID: run.ID, Head: run.HeadSeq, NodeID: in.NodeID, Iteration: in.Iteration, Step: step, NewHash: newHash})
	})
	if err != nil {
		return store.Run{}, err
	}
	e.cache.drop(runID)
	e.reportApproval(ctx, run, p, in, step)
	return store.GetRun(ctx, e.pool, runID)
}

// valueText is an interrupt's value as the node's output: a JSON string as
// its text, anything else as its JSON.
func valueText(v json.RawMessage) (string, error) {
	if len(v) == 0 {
		return "", invalid("value is required: the decision, such as \"approved\"")
	}
	var decoded any
	if err := json.Unmarshal(v, &decoded); err == nil {
		if err := checkNoNUL("value", decoded); err != nil {
			return "", err
		}
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	if !json.Valid(v) {
		return "", invalid("value is not valid JSON")
	}
	return string(v), nil
}

func (e *Engine) resumeRun(ctx context.Context, req ResumeRequest) (store.Run, error) {
	// What the commit did, reported once it is done.
	var (
		run  store.Run
		p    *pipeline.Pipeline
		step runstate.Step
	)
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		run, err = store.LockRun(ctx, tx, req.RunID)
		if err != nil {
			return fmt.Errorf("run %q: %w", req.RunID, err)
		}
		if err := checkVisible(ctx, run); err != nil {
			return err
		}
		if run.Status != runstate.RunFailed {
			return fmt.Errorf("%w: run %s is %s; only a failed run can be resumed (an approval is resumed by its interrupt id)", ErrConflict, run.ID, run.Status)
		}
		p, err = e.pipelineFor(run, req.Migrate)
		if err != nil {
			return err
		}
		st, err := store.LoadState(ctx, tx, run.ID, run.HeadSeq)
		if err != nil {
			return err
		}
		patch := runstate.State{Nodes: map[string]pipeline.NodeState{}}
		for id, ns := range st.Nodes {
			if ns.Status == pipeline.StatusFailed {
				// Pending again; it runs as its next iteration, since
				// the failed one has its result (the failure) committed.
				ns.Status, ns.Attempts = pipeline.StatusPending, 0
				patch.Nodes[id] = ns
			}
		}
		st.Apply(patch)
		step = runstate.Resume(p, st)
		step.Delta.Apply(patch)
		newHash := ""
		if p.Hash() != run.PipelineHash {
			newHash = p.Hash()
		}
		seq := run.HeadSeq + 1
		parent := run.HeadSeq
		batch := &store.Batch{}
		if err := store.InsertCheckpoint(ctx, batch, store.Checkpoint{RunID: run.ID, Seq: seq, ParentRun: run.ID, ParentSeq: &parent, Delta: step.Delta}); err != nil {
			return err
		}
		return e.afterCheckpoint(ctx, tx, batch, p, stepWrite{RunID: run.ID, Seq: seq, Step: step, NewHash: newHash})
	})
	if err != nil {
		return store.Run{}, err
	}
	e.cache.drop(req.RunID)
	// The nodes that run again continue the run's trace; the request that
	// resumed it links to it.
	linkRunTrace(ctx, run)
	e.reportSkipped(runTrace(ctx, run), p, run.ID, "", step)
	return store.GetRun(ctx, e.pool, req.RunID)
}

// Cancel cancels a run: its pending interrupts are cancelled, its running
// nodes stopped (within a lease renewal), and no further node starts.
func (e *Engine) Cancel(ctx context.Context, runID string) (store.Run, error) {
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		run, err := store.LockRun(ctx, tx, runID)
		if err != nil {
			return fmt.Errorf("run %q: %w", runID, err)
		}
		if err := checkVisible(ctx, run); err != nil {
			return err
		}
		if run.Status != runstate.RunRunning && run.Status != runstate.RunWaiting {
			return fmt.Errorf("%w: run %s already %s", ErrConflict, runID, run.Status)
		}
		if err := store.CancelInterrupts(ctx, tx, runID); err != nil {
			return err
		}
		return store.UpdateRun(ctx, tx, runID, store.RunUpdate{HeadSeq: run.HeadSeq, Status: runstate.RunCancelled, Error: "cancelled"})
	})
	if err != nil {
		return store.Run{}, err
	}
	e.cache.drop(runID)
	return store.GetRun(ctx, e.pool, runID)
}

// Prune keeps a run's last keep checkpoints and deletes the older ones: the
// oldest kept checkpoint becomes a full snapshot, and forks that start from
// a deleted checkpoint get a snapshot of their own first, so every state
// stays reachable. It returns how many checkpoints it deleted.
func (e *Engine) Prune(ctx context.Context, runID string, keep int) (int64, error) {
	if keep < 1 {
		return 0, invalid("keep must be at least 1")
	}
	var deleted int64
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		run, err := store.LockRun(ctx, tx, runID)
		if err != nil {
			return fmt.Errorf("run %q: %w", runID, err)
		}
		if err := checkVisible(ctx, run); err != nil {
			return err
		}
		cps, err := store.ListCheckpoints(ctx, tx, runID)
		if err != nil {
			return err
		}
		if len(cps) <= keep {
			return nil
		}
		cut := cps[len(cps)-keep].Seq
		children, err := store.ForkChildren(ctx, tx, runID, cut)
		if err != nil {
			return err
		}
		for _, c := range children {
			st, err := store.LoadState(ctx, tx, c.RunID, c.Seq)
			if err != nil {
				return err
			}
			if err := store.ReplaceWithSnapshot(ctx, tx, c.RunID, c.Seq, st); err != nil {
				return err
			}
		}
		st, err := store.LoadState(ctx, tx, runID, cut)
		if err != nil {
			return err
		}
		if err := store.ReplaceWithSnapshot(ctx, tx, runID, cut, st); err != nil {
			return err
		}
		deleted, err = store.DeleteCheckpointsBefore(ctx, tx, runID, cut)
		return err
	})
	return deleted, err
}
