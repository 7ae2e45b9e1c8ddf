package engine

// Forks: a new run from a checkpoint of another, optionally patched.

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

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
func (e *Engine) Fork(ctx context.Context, req ForkRequest) (api.Run, error) {
	src, err := e.loadVisible(ctx, req.RunID)
	if err != nil {
		return api.Run{}, err
	}
	p, err := e.pipelineFor(src, req.Migrate)
	if err != nil {
		return api.Run{}, err
	}
	if err := checkThread(req.Thread); err != nil {
		return api.Run{}, err
	}
	at, err := store.LoadState(ctx, e.pool, req.RunID, req.Seq)
	if errors.Is(err, store.ErrNotFound) {
		return api.Run{}, fmt.Errorf("checkpoint %d of run %s: %w (list them with the run's checkpoints)", req.Seq, req.RunID, ErrNotFound)
	}
	if err != nil {
		return api.Run{}, err
	}
	patch := runstate.State{}
	if req.Patch != nil {
		if patch, err = checkPatch(p, *req.Patch); err != nil {
			return api.Run{}, err
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

// checkPatch refuses a state patch that names unknown nodes, bad statuses,
// bad inputs or a node's patch.
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
		if ns.Iteration < 0 || ns.Iteration >= math.MaxInt32 || ns.Attempts < 0 || ns.Attempts >= math.MaxInt32 {
			// The node's next iteration and its attempts are 32-bit in
			// the checkpoints: one past them could never be committed,
			// and its agent would run again and again.
			return runstate.State{}, invalid("patch: node %s: iteration %d and attempts %d must be from 0 to %d", id, ns.Iteration, ns.Attempts, math.MaxInt32-1)
		}
		if ns.Patch != "" {
			// A node's patch seeds later workers and becomes the run's
			// patch: it comes only from its worker, through the worker's
			// result gate.
			return runstate.State{}, invalid("patch: node %s: a node's patch comes only from its worker (through the result gate) and cannot be set; set its status to pending to run it again", id)
		}
	}
	if len(patch.Loops) > 0 || len(patch.Sessions) > 0 {
		return runstate.State{}, invalid("patch: only inputs and nodes can be patched")
	}
	return out, nil
}
