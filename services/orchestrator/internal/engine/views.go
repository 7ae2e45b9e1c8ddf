package engine

// What the engine shows of runs: pipelines, a run's view, lists, checkpoints.

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Pipelines describes the catalog's pipelines, by name.
func (e *Engine) Pipelines() []api.PipelineSummary {
	out := []api.PipelineSummary{}
	for _, p := range e.catalog.Pipelines() {
		d := p.Definition()
		inputs := make(map[string]api.Input, len(d.Inputs))
		for name, in := range d.Inputs {
			inputs[name] = api.Input(in) // fails to compile if the two drift apart
		}
		out = append(out, api.PipelineSummary{Name: p.Name(), Description: d.Description, Inputs: inputs, Hash: p.Hash()})
	}
	return out
}

// runNow reads a run's row as the API shows it: what a change to the run
// returns once made.
func (e *Engine) runNow(ctx context.Context, runID string) (api.Run, error) {
	run, err := store.GetRun(ctx, e.pool, runID)
	return run.Run, err
}

// GetRun returns a run with its state, its role sessions, its interrupts and
// its attempts.
func (e *Engine) GetRun(ctx context.Context, id string) (api.RunView, error) {
	run, err := e.loadVisible(ctx, id)
	if err != nil {
		return api.RunView{}, err
	}
	st, err := store.LoadState(ctx, e.pool, id, run.HeadSeq)
	if err != nil {
		return api.RunView{}, err
	}
	v := api.RunView{Run: run.Run, Inputs: st.Inputs, Outputs: map[string]string{}, Loops: st.Loops}
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
			v.Nodes = append(v.Nodes, api.NodeView{ID: id, Role: n.Role, Type: string(n.Type), Status: status, Needs: n.Needs, Next: n.Next, NodeState: ns})
		}
	}
	for id, ns := range st.Nodes {
		if ns.Status == pipeline.StatusSucceeded {
			v.Outputs[id] = ns.Output
		}
	}
	if p != nil {
		v.PatchNode = p.PatchNode()
	}
	if v.Sessions, err = store.ListRoleSessions(ctx, e.pool, run.Thread); err != nil {
		return api.RunView{}, err
	}
	if v.Interrupts, err = store.ListInterrupts(ctx, e.pool, id); err != nil {
		return api.RunView{}, err
	}
	if v.Attempts, err = store.ListAttempts(ctx, e.pool, id); err != nil {
		return api.RunView{}, err
	}
	return v, nil
}

// ListRuns lists runs, newest first; an empty list is not nil. A filter
// with an unknown status, a limit outside 0 to api.MaxListLimit (0 means
// api.DefaultListLimit) or a NUL character is invalid.
func (e *Engine) ListRuns(ctx context.Context, f store.ListFilter) ([]api.Run, error) {
	if err := checkListFilter(f); err != nil {
		return nil, err
	}
	f, ok := listFilter(ctx, f)
	if !ok {
		return []api.Run{}, nil
	}
	runs, err := store.ListRuns(ctx, e.pool, f)
	if errors.Is(err, store.ErrNotFound) {
		return nil, invalid("%v", err)
	}
	if runs == nil && err == nil {
		runs = []api.Run{}
	}
	return runs, err
}

// checkListFilter refuses what ListRuns cannot match: the HTTP API, the MCP
// tools and the console pass a caller's filter on as it came.
func checkListFilter(f store.ListFilter) error {
	for _, p := range []struct{ name, value string }{
		{"pipeline", f.Pipeline}, {"status", f.Status}, {"thread", f.Thread}, {"caller", f.Caller}, {"before", f.Before},
	} {
		if strings.ContainsRune(p.value, 0) {
			return invalid("%s must not contain a NUL character (U+0000)", p.name)
		}
	}
	if f.Status != "" && !slices.Contains(api.RunStatuses(), f.Status) {
		return invalid("status %q is not one of %s", f.Status, strings.Join(api.RunStatuses(), ", "))
	}
	if f.Limit < 0 || f.Limit > api.MaxListLimit {
		return invalid("limit %d is not from 1 to %d (0 means %d)", f.Limit, api.MaxListLimit, api.DefaultListLimit)
	}
	return nil
}

// RunCosts sums what each of runs cost so far (its attempts' costs), for a
// list of runs ListRuns returned to the same viewer.
func (e *Engine) RunCosts(ctx context.Context, runs []api.Run) (map[string]float64, error) {
	ids := make([]string, 0, len(runs))
	for _, r := range runs {
		if CanView(ctx, r) {
			ids = append(ids, r.ID)
		}
	}
	return store.RunCosts(ctx, e.pool, ids)
}

// Checkpoints lists a run's checkpoints: each one's delta and where it
// comes from.
func (e *Engine) Checkpoints(ctx context.Context, runID string) ([]api.Checkpoint, error) {
	if _, err := e.loadVisible(ctx, runID); err != nil {
		return nil, err
	}
	cps, err := store.ListCheckpoints(ctx, e.pool, runID)
	if cps == nil && err == nil {
		cps = []api.Checkpoint{}
	}
	return cps, err
}

// RecentCheckpoints lists a run's newest checkpoints, newest first, at most
// limit, without their deltas (store.RecentCheckpoints).
func (e *Engine) RecentCheckpoints(ctx context.Context, runID string, limit int) ([]api.Checkpoint, error) {
	if _, err := e.loadVisible(ctx, runID); err != nil {
		return nil, err
	}
	return store.RecentCheckpoints(ctx, e.pool, runID, limit)
}

// RecentAgentEvents lists what a run's agents did last, newest first, at
// most limit (store.RecentAgentEvents).
func (e *Engine) RecentAgentEvents(ctx context.Context, runID string, limit int) ([]store.AgentEvent, error) {
	if _, err := e.loadVisible(ctx, runID); err != nil {
		return nil, err
	}
	return store.RecentAgentEvents(ctx, e.pool, runID, limit)
}
