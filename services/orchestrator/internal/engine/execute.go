package engine

// A node's attempt: the state it runs over, and its task given to its
// role's executor (once, or once per foreach item).

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtext"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

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
	task   string
	output string
	patch  string
	// patchOmits are the changed files the patch leaves out.
	patchOmits []string
	session    string
	role       string
	cost       float64
	// journey is the marketplace journey the attempt worked in, and
	// changeDigest the digest of the workspace it left there, recorded
	// with it (ExportWorkspace).
	journey, changeDigest string
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
	if s := p.Source(a.NodeID); s != nil && s.From != "" {
		// The change's journey is where its node ran: in a fork, maybe
		// on the thread of the run it was forked from.
		var err error
		if req.Source.FromThread, err = store.NodeThread(ctx, e.pool, run.ID, s.From); err != nil {
			return res, err
		}
	}
	req.OnWorker = func(id string) error {
		// Bounded past a stop of the worker under way, which the record
		// waits for.
		recCtx, cancel := context.WithTimeout(ctx, releaseTimeout+10*time.Second)
		defer cancel()
		return store.RecordRunWorker(recCtx, e.pool, run.ID, string(role.Via), id)
	}
	if n.IsForeach() {
		out, cost, err := e.executeItems(ctx, p, n, ps, ex, req)
		res.output, res.cost = out, cost
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
		res.task = textcut.Clip(pgtext.Scrub(task), maxAttemptTask, "…")
	} else {
		res.task = textcut.Clip(pgtext.Scrub(strings.Join(n.Command, " ")), maxAttemptTask, "…")
	}
	if !sessionKnown {
		if session, err = store.RoleSession(ctx, e.pool, run.Thread, n.Role); err != nil {
			return res, err
		}
	}
	req.Task, req.SessionID = task, session
	if session != "" && role.Via == pipeline.ViaMesh {
		// A fork's first node of the role works in a copy of the session
		// the fork was seeded with: the run it came from goes on in it.
		// The copy is saved as the role's session when the agent names it.
		if req.ForkSession, err = store.SessionSeeded(ctx, e.pool, run.Thread, n.Role, session); err != nil {
			return res, err
		}
	}
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
	r.Output, r.SessionID = pgtext.Scrub(r.Output), pgtext.Scrub(r.SessionID)
	res.session, res.cost, res.patch = r.SessionID, r.CostUSD, pgtext.Scrub(r.Patch)
	res.patchOmits, res.journey, res.changeDigest = patchOmits(r.PatchOmits), pgtext.Scrub(r.Journey), pgtext.Scrub(r.ChangeDigest)
	if !telemetry.UsageOK(res.cost, telemetry.MaxAgentCostUSD) {
		// The worker's own report: a negative or absurd cost (past what
		// the attempt's row holds, which would fail the node's commit and
		// run the agent again) counts as not reported.
		e.logger.WarnContext(ctx, "an executor reported a cost out of range; recorded as none", slog.String("run", run.ID), slog.String("node", a.NodeID), slog.Float64("cost_usd", res.cost))
		res.cost = 0
	}
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

// patchOmits is what a node's state keeps of the paths its patch leaves
// out: at most api.MaxPatchOmits, each as Postgres's text takes it.
func patchOmits(paths []string) []string {
	if len(paths) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(paths), api.MaxPatchOmits))
	for _, p := range paths[:min(len(paths), api.MaxPatchOmits)] {
		out = append(out, pgtext.Scrub(p))
	}
	return out
}

// maxAttemptTask bounds the task recorded with an attempt, in bytes.
const maxAttemptTask = 16 << 10

// maxAttemptError bounds a failed attempt's error, recorded with the
// attempt and in the run's state, in bytes.
const maxAttemptError = 4000

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
// items' outputs, in item order, and its cost what the items reported (a
// failed item's too: it was spent), each in range (telemetry.UsageOK).
func (e *Engine) executeItems(ctx context.Context, p *pipeline.Pipeline, n *pipeline.Node, ps pipeline.State, ex executor.Executor, base executor.Request) (out string, cost float64, err error) {
	items, err := p.ForeachItems(n.ID, ps)
	if err != nil {
		return "", 0, err
	}
	var mu sync.Mutex
	spent := func(c float64) {
		if telemetry.UsageOK(c, telemetry.MaxAgentCostUSD) {
			mu.Lock()
			cost = min(cost+c, telemetry.MaxAgentCostUSD)
			mu.Unlock()
		}
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
			spent(r.CostUSD)
			if err != nil {
				return fmt.Errorf("item %d: %w", i, err)
			}
			outs[i] = pgtext.Scrub(r.Output)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return "", cost, err
	}
	b, err := json.Marshal(outs)
	return string(b), cost, err
}
