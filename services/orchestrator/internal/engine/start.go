package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/api"
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

// ErrUnavailable is returned when a service the operation needs (the
// marketplace) did not answer, or answered that it cannot now.
var ErrUnavailable = errors.New("unavailable")

// ErrBusy is returned when the replica does as many of an operation at once
// as it may (workspace exports): trying again later can succeed.
var ErrBusy = errors.New("busy")

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

// StartRun starts a run: its first checkpoint, its lease and its root
// nodes' jobs commit together, except the first node's when this replica
// works it at once (startChain).
func (e *Engine) StartRun(ctx context.Context, req StartRequest) (api.Run, error) {
	p, ok := e.catalog.Lookup(req.Pipeline)
	if !ok {
		var names []string
		for _, p := range e.catalog.Pipelines() {
			names = append(names, p.Name())
		}
		return api.Run{}, fmt.Errorf("pipeline %q: %w (known: %s)", req.Pipeline, ErrNotFound, strings.Join(names, ", "))
	}
	if err := checkNoNUL("inputs", req.Inputs); err != nil {
		return api.Run{}, err
	}
	inputs, err := p.CheckInputs(req.Inputs)
	if err != nil {
		return api.Run{}, invalid("%v", err)
	}
	if err := checkThread(req.Thread); err != nil {
		return api.Run{}, err
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
func (e *Engine) createRun(ctx context.Context, p *pipeline.Pipeline, step runstate.Step, n store.NewRun, sessions map[string]string, lockSource string) (api.Run, error) {
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
	// A start that makes one node ready goes on with it here, with the
	// run's lease taken in the same statement that creates the run.
	first := e.firstNode(p, step, n.ID)
	if first != nil {
		n.LeaseOwner, n.LeaseTTL = e.cfg.ReplicaID, e.cfg.LeaseTTL
	}
	var created store.Run
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if lockSource != "" {
			if err := store.ShareLockRun(ctx, tx, lockSource); err != nil {
				return err
			}
		}
		// A new thread, named by the run's fresh id, has no other run on it.
		if n.Thread != n.ID {
			if err := store.LockThread(ctx, tx, n.Thread); err != nil {
				return err
			}
			if err := checkThreadOwner(ctx, tx, n.Thread); err != nil {
				return err
			}
			if step.Status == runstate.RunRunning {
				if err := threadFree(ctx, tx, n.Thread, n.ID); err != nil {
					return err
				}
			}
		}
		if _, err := store.InsertRun(ctx, tx, n); err != nil {
			return err
		}
		batch := &store.Batch{}
		if err := store.InsertCheckpoint(ctx, batch, store.Checkpoint{RunID: n.ID, Seq: 0, ParentRun: n.ForkedFromRun, ParentSeq: n.ForkedFromSeq, Delta: api.State(step.Delta)}); err != nil {
			return err
		}
		if len(sessions) > 0 {
			if err := store.SeedRoleSessions(ctx, batch, n.Thread, n.ID, sessions); err != nil {
				return err
			}
		}
		if err := e.afterCheckpoint(ctx, tx, batch, p, stepWrite{RunID: n.ID, Seq: 0, Step: step, Inline: first}); err != nil {
			return err
		}
		// The run as this transaction made it: read after the commit, a
		// worker may already have moved it on, and callers would see a
		// run that is sometimes running and sometimes done.
		var err error
		created, err = store.GetRun(ctx, tx, n.ID)
		return err
	})
	if err != nil {
		if first != nil {
			e.leases.end(first.key())
			e.chains.done()
		}
		return api.Run{}, err
	}
	e.cache.put(n.ID, 0, step.Next)
	if first != nil {
		// A new thread has only the sessions the run was seeded with.
		e.leases.adopt(created, store.FirstFence)
		e.startChain(store.Lease{Fence: store.FirstFence, Run: created, Session: sessions[first.Role]}, n.Thread == n.ID, *first)
	}
	e.reportSkipped(ctx, p, n.ID, "", step)
	return created.Run, nil
}

// claimThread takes thread's lock until tx ends, and refuses to set run
// going on the thread while another run works on it (ErrConflict, naming
// that run). The runs of a thread continue its roles' agent sessions and
// marketplace journeys, so they take turns: a run that settles (it ends, or
// waits for an approval) leaves the thread to the next once its attempts
// have returned. Callers lock run rows before the thread, as every writer
// does.
func claimThread(ctx context.Context, tx pgx.Tx, thread, run string) error {
	if err := store.LockThread(ctx, tx, thread); err != nil {
		return err
	}
	return threadFree(ctx, tx, thread, run)
}

// threadFree is claimThread's check, for a caller that holds the thread's
// lock already. The run it names is named only to a viewer who may see it.
func threadFree(ctx context.Context, tx pgx.Tx, thread, run string) error {
	other, found, err := store.WorkingOnThread(ctx, tx, thread, run)
	if err != nil || !found {
		return err
	}
	name := "run " + other.ID
	if !visible(ctx, other) {
		name = "another caller's run"
	}
	if other.Status == runstate.RunRunning {
		return fmt.Errorf("%w: %s is running on thread %q, and the runs of a thread take turns (they continue its roles' sessions and workspaces): wait until it ends or waits for an approval, cancel it, or use another thread",
			ErrConflict, name, thread)
	}
	return fmt.Errorf("%w: %s on thread %q is %s, but its attempts under way have not returned yet, and the runs of a thread take turns (they continue its roles' sessions and workspaces): try again in a moment, or use another thread",
		ErrConflict, name, thread, other.Status)
}

// firstNode returns the node a new run's first step makes ready, for this
// replica to work at once (see startChain): when the step makes exactly one
// node ready and opens no interrupt, and a chain slot is free. Its slot is
// acquired and its key taken; nil otherwise, and the node gets a River job.
func (e *Engine) firstNode(p *pipeline.Pipeline, step runstate.Step, runID string) *nodeArgs {
	id, ok := loneNode(step)
	if !ok || !e.chains.acquire() {
		return nil
	}
	a := scheduled(p, runID, step, id, 0)
	if !e.leases.begin(a.key()) {
		e.chains.done()
		return nil
	}
	return &a
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
