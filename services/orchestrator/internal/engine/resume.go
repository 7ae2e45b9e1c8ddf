package engine

// Resuming: an approval decided, or a failed run run again.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

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

// continuation is what a resumed run goes on from, in tx: its definition
// (pipelineFor) and its state at its head.
func (e *Engine) continuation(ctx context.Context, tx pgx.Tx, run store.Run, migrate bool) (*pipeline.Pipeline, runstate.State, error) {
	p, err := e.pipelineFor(run, migrate)
	if err != nil {
		return nil, runstate.State{}, err
	}
	st, err := store.LoadState(ctx, tx, run.ID, run.HeadSeq)
	return p, st, err
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
func (e *Engine) Resume(ctx context.Context, req ResumeRequest) (api.Run, error) {
	switch {
	case req.InterruptID != "" && req.RunID != "":
		return api.Run{}, invalid("give interrupt_id or run_id, not both")
	case req.InterruptID != "":
		return e.resumeInterrupt(ctx, req)
	case req.RunID != "":
		return e.resumeRun(ctx, req)
	default:
		return api.Run{}, invalid("interrupt_id (to resume an approval) or run_id (to resume a failed run) is required")
	}
}

func (e *Engine) resumeInterrupt(ctx context.Context, req ResumeRequest) (api.Run, error) {
	value, err := valueText(req.Value)
	if err != nil {
		return api.Run{}, err
	}
	var runID string
	runID, err = store.InterruptRun(ctx, e.pool, req.InterruptID)
	if err != nil {
		return api.Run{}, fmt.Errorf("interrupt %q: %w", req.InterruptID, err)
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
		var st runstate.State
		p, st, err = e.continuation(ctx, tx, run, req.Migrate)
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
		// A run already running (another branch works) holds its thread.
		if run.Status != runstate.RunRunning && step.Status == runstate.RunRunning {
			if err := claimThread(ctx, tx, run.Thread, run.ID); err != nil {
				return err
			}
		}
		newHash := ""
		if p.Hash() != run.PipelineHash {
			newHash = p.Hash()
		}
		return e.applyStep(ctx, tx, &store.Batch{}, p, stepWrite{RunID: run.ID, Head: run.HeadSeq, NodeID: in.NodeID, Iteration: in.Iteration, Step: step, NewHash: newHash})
	})
	if err != nil {
		return api.Run{}, err
	}
	e.cache.drop(runID)
	e.reportApproval(ctx, run, p, in, step)
	return e.runNow(ctx, runID)
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

func (e *Engine) resumeRun(ctx context.Context, req ResumeRequest) (api.Run, error) {
	// What the commit did, reported once it is done.
	var (
		run  store.Run
		p    *pipeline.Pipeline
		step runstate.Step
	)
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		run, err = lockVisible(ctx, tx, req.RunID)
		if err != nil {
			return err
		}
		if run.Status != runstate.RunFailed {
			return fmt.Errorf("%w: run %s is %s; only a failed run can be resumed (an approval is resumed by its interrupt id)", ErrConflict, run.ID, run.Status)
		}
		var st runstate.State
		p, st, err = e.continuation(ctx, tx, run, req.Migrate)
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
		if step.Status == runstate.RunRunning {
			if err := claimThread(ctx, tx, run.Thread, run.ID); err != nil {
				return err
			}
		}
		step.Delta.Apply(patch)
		newHash := ""
		if p.Hash() != run.PipelineHash {
			newHash = p.Hash()
		}
		seq := run.HeadSeq + 1
		parent := run.HeadSeq
		batch := &store.Batch{}
		if err := store.InsertCheckpoint(ctx, batch, store.Checkpoint{RunID: run.ID, Seq: seq, ParentRun: run.ID, ParentSeq: &parent, Delta: api.State(step.Delta)}); err != nil {
			return err
		}
		return e.afterCheckpoint(ctx, tx, batch, p, stepWrite{RunID: run.ID, Seq: seq, Step: step, NewHash: newHash})
	})
	if err != nil {
		return api.Run{}, err
	}
	e.cache.drop(req.RunID)
	// The nodes that run again continue the run's trace; the request that
	// resumed it links to it.
	linkRunTrace(ctx, run)
	e.reportSkipped(runTrace(ctx, run), p, run.ID, "", step)
	return e.runNow(ctx, req.RunID)
}
