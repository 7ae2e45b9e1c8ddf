package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"

	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Viewer is who an operation is done for. A run belongs to the caller that
// started it (or forked it): other callers get "not found" for it, as they
// would for a run that does not exist, so ids cannot be probed. An admin
// sees and acts on every run.
type Viewer struct {
	Caller string
	Admin  bool
}

type viewerKey struct{}

// WithViewer returns ctx carrying v: the API and the MCP tools set it from
// the request's caller before they call the engine. Without a viewer (the
// engine's own work, tests of the engine) every run is visible.
func WithViewer(ctx context.Context, v Viewer) context.Context {
	return context.WithValue(ctx, viewerKey{}, v)
}

func viewerOf(ctx context.Context) (Viewer, bool) {
	v, ok := ctx.Value(viewerKey{}).(Viewer)
	return v, ok
}

// visible reports whether ctx's viewer may see run.
func visible(ctx context.Context, run api.Run) bool {
	v, ok := viewerOf(ctx)
	return !ok || v.Admin || run.Caller == v.Caller
}

// CanView reports whether ctx's viewer may see run (its page, its
// checkpoints and events), as the engine's own reads decide.
func CanView(ctx context.Context, run api.Run) bool { return visible(ctx, run) }

// checkVisible returns the error of a missing run when ctx's viewer may
// not see run.
func checkVisible(ctx context.Context, run store.Run) error {
	if !visible(ctx, run.Run) {
		return fmt.Errorf("run %q: %w", run.ID, ErrNotFound)
	}
	return nil
}

// loadVisible loads a run ctx's viewer may see.
func (e *Engine) loadVisible(ctx context.Context, id string) (store.Run, error) {
	run, err := store.GetRun(ctx, e.pool, id)
	if err != nil {
		return store.Run{}, fmt.Errorf("run %q: %w", id, err)
	}
	return run, checkVisible(ctx, run)
}

// lockVisible locks a run ctx's viewer may see, in tx (store.LockRun).
func lockVisible(ctx context.Context, tx pgx.Tx, id string) (store.Run, error) {
	run, err := store.LockRun(ctx, tx, id)
	if err != nil {
		return store.Run{}, fmt.Errorf("run %q: %w", id, err)
	}
	return run, checkVisible(ctx, run)
}

// listFilter narrows f to the runs ctx's viewer may see; ok is false when
// f asks for another caller's runs, which a viewer that is not an admin
// never sees.
func listFilter(ctx context.Context, f store.ListFilter) (_ store.ListFilter, ok bool) {
	v, has := viewerOf(ctx)
	if !has || v.Admin {
		return f, true
	}
	if f.Caller != "" && f.Caller != v.Caller {
		return f, false
	}
	f.Caller = v.Caller
	return f, true
}

// checkThreadOwner refuses a thread that runs of another caller are on,
// unless ctx's viewer is an admin: a thread carries its runs' role
// sessions, which would otherwise pass to whoever names it. Callers hold
// the thread's lock (store.LockThread), so that two callers cannot both
// take a new thread.
func checkThreadOwner(ctx context.Context, q store.Querier, thread string) error {
	v, ok := viewerOf(ctx)
	if !ok || v.Admin {
		return nil
	}
	used, err := store.ThreadUsedByOthers(ctx, q, thread, v.Caller)
	if err != nil {
		return err
	}
	if used {
		return fmt.Errorf("%w: thread %q is another caller's; choose another name", ErrConflict, thread)
	}
	return nil
}

// ErrForbidden refuses a caller who sees a run an action it may not take:
// deciding an approval whose node names other approvers.
var ErrForbidden = errors.New("forbidden")

// mayDecide checks that ctx's viewer may decide the interrupt: an admin,
// one of the approvers its node names, or, when it names none, the run's
// caller. Anyone else gets "not found", as for an interrupt that does not
// exist, unless they see the run (then they are told who decides).
func (e *Engine) mayDecide(ctx context.Context, run store.Run, in store.Interrupt) error {
	v, ok := viewerOf(ctx)
	if !ok || v.Admin {
		return nil
	}
	var approvers []string
	if p, err := e.pipelineFor(run, true); err == nil {
		if n, ok := p.Node(in.NodeID); ok {
			approvers = n.Approvers
		}
	}
	switch {
	case len(approvers) == 0 && run.Caller == v.Caller:
		return nil
	case slices.Contains(approvers, v.Caller):
		return nil
	case run.Caller == v.Caller:
		return fmt.Errorf("%w: approval %s of node %s is decided by %s", ErrForbidden, in.ID, in.NodeID, strings.Join(approvers, ", "))
	}
	return fmt.Errorf("interrupt %q: %w", in.ID, ErrNotFound)
}

// Approval is a pending approval its viewer may decide, with what it is
// decided on.
type Approval struct {
	Run       api.Run
	Interrupt store.Interrupt
	// Inputs and Outputs are the run's inputs and its succeeded nodes'
	// outputs at its head.
	Inputs  map[string]any
	Outputs map[string]string
	// Visible: the viewer sees the run itself (its page, its
	// checkpoints); a named approver of another caller's run sees only
	// this.
	Visible bool
}

// maxInbox bounds the approvals PendingApprovals looks at.
const maxInbox = 500

// PendingApprovals lists the approvals ctx's viewer may decide, oldest
// first: those of its own runs whose node names no approvers, and those of
// any caller's run whose node names it (all of them for an admin). A named
// approver is shown the run's inputs and outputs, what it decides on,
// though the run is not its own.
func (e *Engine) PendingApprovals(ctx context.Context) ([]Approval, error) {
	pending, err := store.PendingInterrupts(ctx, e.pool, maxInbox)
	if err != nil {
		return nil, err
	}
	runs := map[string]*store.Run{}
	var out []Approval
	for _, in := range pending {
		run, seen := runs[in.RunID]
		if !seen {
			if r, err := store.GetRun(ctx, e.pool, in.RunID); err == nil {
				run = &r
			}
			runs[in.RunID] = run
		}
		if run == nil || e.mayDecide(ctx, *run, in) != nil {
			continue // gone since the list, or not the viewer's to decide
		}
		st, err := store.LoadState(ctx, e.pool, run.ID, run.HeadSeq)
		if err != nil {
			return nil, err
		}
		a := Approval{Run: run.Run, Interrupt: in, Inputs: st.Inputs, Outputs: map[string]string{}, Visible: visible(ctx, run.Run)}
		for id, ns := range st.Nodes {
			if ns.Status == pipeline.StatusSucceeded {
				a.Outputs[id] = ns.Output
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// ErrorCode is the code (package meshapi) of an error the engine returns
// for callers, the one place its errors are classified: the API, the MCP
// tools and the console all ask it. Anything else is CodeInternal, whose
// message is not for callers.
func ErrorCode(err error) meshapi.Code {
	var inv *InvalidError
	switch {
	case errors.As(err, &inv):
		return meshapi.CodeInvalidArgument
	case errors.Is(err, ErrNotFound):
		return meshapi.CodeNotFound
	case errors.Is(err, ErrPipelineChanged):
		return meshapi.CodePipelineChanged
	case errors.Is(err, ErrConflict):
		return meshapi.CodeConflict
	case errors.Is(err, ErrForbidden):
		return meshapi.CodePermissionDenied
	case errors.Is(err, ErrUnavailable), errors.Is(err, executor.ErrUnavailable):
		return meshapi.CodeUnavailable
	case errors.Is(err, ErrBusy):
		return meshapi.CodeResourceExhausted
	}
	return meshapi.CodeInternal
}
