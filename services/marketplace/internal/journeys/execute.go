package journeys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/meshwork/meshwork/pkg/action"
	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// ExecuteResult is the output of execute_in_worker.
type ExecuteResult struct {
	Executed   bool                 `json:"executed"`
	Output     any                  `json:"output,omitempty"`
	SessionID  string               `json:"session_id,omitempty"`
	ActionType string               `json:"action_type,omitempty"`
	Workspace  string               `json:"workspace,omitempty"`
	Violations []meshtype.Violation `json:"violations,omitempty"`
	Message    string               `json:"message,omitempty"`
}

// Execute decodes an action strictly, checks it against the journey's gate
// and, only if it is allowed, runs it in the worker. Every outcome is
// recorded in the audit log. A refused action returns Executed false with the
// violations; it is not an error.
func (m *Manager) Execute(ctx context.Context, caller, journeyID string, rawAction []byte) (ExecuteResult, error) {
	start := time.Now()
	if err := checkJourneyID(journeyID); err != nil {
		return ExecuteResult{}, err
	}
	j, err := m.cfg.Store.Journey(ctx, caller, journeyID)
	if errors.Is(err, store.ErrNotFound) {
		return ExecuteResult{}, notFound("no journey %q (spawn_worker creates it)", journeyID)
	}
	if err != nil {
		return ExecuteResult{}, err
	}
	// One action at a time per journey, counters read under the lock: two
	// concurrent actions cannot both pass a limit only one fits under.
	ctx, unlock, err := m.lockJourneyForAction(ctx, j.UID)
	if err != nil {
		return ExecuteResult{}, err
	}
	defer unlock()
	if j, err = m.cfg.Store.TouchJourney(ctx, j.UID); err != nil {
		return ExecuteResult{}, err
	}
	entry, ok := m.cfg.Catalog.Lookup(j.WorkerID)
	if !ok {
		return ExecuteResult{}, unavailable("worker %s of journey %q is no longer in the catalog", j.WorkerID, j.ID)
	}
	a, decodeErr := action.Decode(rawAction)
	actionType := string(a.Type) // one of the action types once decoded
	if decodeErr != nil {
		actionType = "invalid"
	}
	ctx, span := startAction(ctx, j, entry, actionType)
	defer span.End()
	rec := store.ActionRecord{
		JourneyUID: j.UID, Caller: caller, WorkerID: j.WorkerID, DefinitionHash: entry.Hash,
		RequestBytes: int64(len(rawAction)), ActionType: actionType, TraceID: traceID(span),
	}

	if decodeErr != nil {
		rec.Decision = store.DecisionRefused
		rec.Violations = []meshtype.Violation{{ConstraintID: "malformed_action", Violated: true, Message: decodeErr.Error()}}
		telemetry.RecordGateDecision(span, false, violationIDs(rec.Violations))
		telemetry.Fail(span, decodeErr, string(CodeInvalidArgument))
		m.record(ctx, rec, start)
		return ExecuteResult{}, invalid("%v", decodeErr)
	}
	rec.Target = auditTarget(&a)

	// The gate comes first, always: a refused action never reaches the worker,
	// whatever state the worker is in.
	vs := entry.Gate.Evaluate(&a, meshtype.JourneyState{ActionCount: j.ActionCount, CostUSD: j.CostUSD})
	telemetry.RecordGateDecision(span, len(vs) == 0, violationIDs(vs))
	if len(vs) > 0 {
		telemetry.Fail(span, nil, errorTypeRefused)
		rec.Decision, rec.Violations = store.DecisionRefused, vs
		m.record(ctx, rec, start)
		msgs := make([]string, len(vs))
		for i, v := range vs {
			msgs[i] = v.Message
		}
		return ExecuteResult{
			Executed: false, ActionType: string(a.Type), Violations: vs,
			Message: "Constraint violation detected: " + strings.Join(msgs, "; "),
		}, nil
	}

	notLive := func(state store.JourneyState) (ExecuteResult, error) {
		rec.Decision, rec.Error = store.DecisionFailed, "journey is "+string(state)
		telemetry.Fail(span, nil, string(CodeNotLive))
		m.record(ctx, rec, start)
		return ExecuteResult{}, &Error{Code: CodeNotLive, Message: fmt.Sprintf("journey %q is %s; spawn_worker with mode resume restarts it with its workspace", j.ID, state)}
	}
	if !j.State.Live() {
		return notLive(j.State)
	}
	// A live channel to the journey's worker says it runs: its session
	// ends with the container. Without one, the runtime is asked (the
	// engine round trip that a live channel saves every action).
	if !m.openTo(j) && !m.checkLive(ctx, j) {
		return notLive(store.StateOrphaned)
	}

	out, cost, runErr := m.run(ctx, j, entry, &a, &rec.ToolCalls)
	rec.CostUSD = cost // an agent's spend counts even when its run failed
	if broke := errors.Is(runErr, errChannelBroken); broke || errors.Is(runErr, errNoChannel) {
		// Perhaps because the worker is gone: then the client is told so.
		// A read may have been retried on a new channel after the first
		// broke (run): it did not change anything either way.
		if ended := m.workerEnded(ctx, j, broke && !idempotent(a.Type)); ended != nil {
			m.logger.WarnContext(ctx, "the worker stopped under an action", slog.String("journey", j.UID.String()), slog.Any("error", runErr))
			runErr = ended
		}
	}
	if runErr != nil && errors.Is(context.Cause(ctx), errLockLost) {
		runErr = unavailable("%v", errLockLost)
	}
	if runErr != nil {
		telemetry.Fail(span, runErr, errorType(runErr))
		rec.Decision, rec.Error = store.DecisionFailed, runErr.Error()
		m.record(ctx, rec, start)
		if e, ok := AsError(runErr); ok {
			return ExecuteResult{}, e
		}
		m.logger.ErrorContext(ctx, "action failed", slog.String("journey", j.UID.String()), slog.String("type", string(a.Type)), slog.Any("error", runErr))
		return ExecuteResult{}, unavailable("running the action failed: %v", runErr)
	}
	encoded, _ := json.Marshal(out)
	rec.Decision, rec.ResponseBytes = store.DecisionAllowed, int64(len(encoded))
	m.record(ctx, rec, start)
	session := j.AgentSessionID
	if r, ok := out.(agentResult); ok {
		session = r.SessionID
	}
	return ExecuteResult{Executed: true, Output: out, SessionID: session, ActionType: string(a.Type), Workspace: j.Workspace}, nil
}

// record writes the audit row; losing it must not be silent.
func (m *Manager) record(ctx context.Context, rec store.ActionRecord, start time.Time) {
	rec.Duration = time.Since(start)
	m.metrics.actions.WithLabelValues(rec.ActionType, string(rec.Decision)).Observe(rec.Duration.Seconds())
	for _, v := range rec.Violations {
		m.metrics.refusals.WithLabelValues(v.ConstraintID).Inc()
	}
	if err := m.cfg.Store.RecordAction(context.WithoutCancel(ctx), rec); err != nil {
		m.logger.ErrorContext(ctx, "writing the audit log failed", slog.String("journey", rec.JourneyUID.String()), slog.Any("error", err))
	}
}

// maxAuditTarget bounds an audit row's target: an exec's command line may
// run to a megabyte of arguments.
const maxAuditTarget = 1024

// auditTarget is what an action's audit row names: its path, or for an
// exec the command line, each argument quoted as a shell would read it (an
// exec never goes through one: the quoting only shows where arguments
// begin and end). Only what the bound keeps is quoted: an exec may carry
// megabytes of arguments, and quoting can make them several times longer.
func auditTarget(a *meshtype.Action) string {
	if a.Type != meshtype.ActionExec {
		return a.Target
	}
	var b strings.Builder
	for i, arg := range a.Command {
		if i > 0 {
			b.WriteByte(' ')
		}
		whole := len(arg) <= maxAuditTarget
		arg = textcut.Clip(arg, maxAuditTarget, "")
		q, err := syntax.Quote(arg, syntax.LangBash)
		if err != nil { // a NUL byte, which the decoder refuses before this
			q = strconv.Quote(arg)
		}
		b.WriteString(q)
		if !whole || b.Len() > maxAuditTarget {
			return textcut.Clip(b.String(), maxAuditTarget, "") + "…"
		}
	}
	return b.String()
}

// toolCall maps an action to the worker's MCP tool and arguments.
func toolCall(a *meshtype.Action) (string, any) {
	target := func() string {
		t, err := gate.CleanTarget(a.Target)
		if err != nil { // the gate already refused unsafe targets
			return a.Target
		}
		return t
	}
	switch a.Type {
	case meshtype.ActionRead:
		return "read", map[string]any{"path": target()}
	case meshtype.ActionWrite:
		return "write", map[string]any{"path": target(), "content": a.Content}
	case meshtype.ActionList:
		return "list", map[string]any{"path": target()}
	case meshtype.ActionSearch:
		return "search", map[string]any{"path": target(), "pattern": a.Pattern}
	case meshtype.ActionExec:
		return "exec", map[string]any{"command": a.Command}
	case meshtype.ActionDelete:
		return "delete", map[string]any{"path": target()}
	case meshtype.ActionTool:
		args := a.Arguments
		if args == nil {
			args = map[string]any{}
		}
		return a.Tool, args
	}
	return "", nil
}

// run sends an allowed action to the journey's worker. It returns the
// output and what the action cost (agent workers).
// An agent's own tool calls, as the gate in its worker decided them, go to
// toolCalls, also when the run failed.
func (m *Manager) run(ctx context.Context, j store.Journey, entry *workerdef.Entry, a *meshtype.Action, toolCalls *[]meshtype.ToolDecision) (any, float64, error) {
	task, wait := m.actionTimeouts(&entry.Definition)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if entry.Definition.Kind == meshtype.KindAgent {
		return m.runAgent(ctx, j, entry, a, task, toolCalls)
	}
	if a.Type == meshtype.ActionTask {
		return nil, 0, invalid("task actions need an agent worker")
	}
	tool, args := toolCall(a)
	res, err := m.callWorker(ctx, j, entry, tool, args)
	if errors.Is(err, errChannelBroken) && idempotent(a.Type) {
		// A fresh channel for a read-only action is safe to retry; anything
		// that changes the workspace is not, as it may have run.
		res, err = m.callWorker(ctx, j, entry, tool, args)
	}
	if err != nil {
		return nil, 0, err
	}
	if res.IsError {
		return nil, 0, &Error{Code: meshapi.CodeWorkerFailed, Message: toolText(res)}
	}
	out := res.StructuredContent
	if out == nil {
		out = map[string]any{"text": toolText(res)}
	}
	return filterDenied(entry.Gate, out), 0, nil
}

// actionGrace is how long the marketplace waits past a definition's
// action_timeout: the worker stops the command or the agent at the
// timeout, and its answer (the output so far, the agent's cost and
// session) still has to come back.
const actionGrace = 30 * time.Second

// actionTimeouts reads d's action_timeout once for both sides of an
// action. task is how long an agent's task may run: the timeout, or what
// leaves the grace within the marketplace's bound. wait is how long the
// marketplace waits for the action: the timeout and the grace (a builtin
// or agent worker stops its command or agent at the timeout and answers),
// the timeout itself for an MCP server, which is told none, or the
// marketplace's own bound.
func (m *Manager) actionTimeouts(d *meshtype.Definition) (task, wait time.Duration) {
	t := time.Duration(d.Constraints.ActionTimeout)
	switch {
	case t == 0:
		return max(m.cfg.ActionTimeout-actionGrace, m.cfg.ActionTimeout/2), m.cfg.ActionTimeout
	case d.Kind == meshtype.KindMCP:
		return t, t
	}
	return t, t + actionGrace
}

func idempotent(t meshtype.ActionType) bool {
	return t == meshtype.ActionRead || t == meshtype.ActionList || t == meshtype.ActionSearch
}

// callWorker calls a tool over the journey's channel, opening one if needed.
func (m *Manager) callWorker(ctx context.Context, j store.Journey, entry *workerdef.Entry, tool string, args any) (*mcp.CallToolResult, error) {
	c, err := m.channel(ctx, j, entry)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken.Load() {
		return nil, errChannelBroken
	}
	res, err := c.call(ctx, tool, args)
	if c.broken.Load() {
		m.dropChannelIf(j.UID, c)
	}
	return res, err
}

func (m *Manager) channel(ctx context.Context, j store.Journey, entry *workerdef.Entry) (*channel, error) {
	m.mu.Lock()
	c := m.channels[j.UID]
	m.mu.Unlock()
	if c.liveTo(j.ContainerID) {
		return c, nil
	}
	if c != nil {
		// The journey's worker was replaced (maybe by another
		// marketplace, which could not drop this one's channel), or the
		// channel's session ended or broke: a new one is opened.
		m.dropChannelIf(j.UID, c)
	}
	rt, _, err := m.runtimeFor(j.IsolationLevel)
	if err != nil {
		return nil, err
	}
	c, err = openChannel(ctx, rt, handle(j), serverArgv(entry), frameLimit(&entry.Definition))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoChannel, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if existing := m.channels[j.UID]; existing != nil {
		if existing.liveTo(j.ContainerID) {
			c.close() // another request opened one first
			return existing, nil
		}
		existing.close() // stale: the worker was replaced meanwhile
	}
	m.channels[j.UID] = c
	return c, nil
}

// workerEnded explains an action whose channel broke, or could not be
// opened (ran is false: the action did not reach the worker), when the
// reason is that the journey's worker stopped (killed, crashed, or its
// main process out of memory): the journey is then orphaned (checkLive)
// and the client told how the worker ended and how to go on, rather than
// what the transport saw. It returns nil when the worker still runs.
func (m *Manager) workerEnded(ctx context.Context, j store.Journey, ran bool) error {
	// The action's deadline may be what ended it; the engine still gets a
	// bound.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), workerEndGrace+workerEndAsk)
	defer cancel()
	how := "it is no longer running"
	if rt, _, err := m.runtimeFor(j.IsolationLevel); err == nil {
		if r, ok := rt.(workerruntime.ExitReporter); ok {
			// The engine records a worker's end a moment after its
			// streams close: asked again until it says, or the grace ends.
			// A removed worker (a stop_worker meanwhile) has nothing more to say.
			for deadline := time.Now().Add(workerEndGrace); ; time.Sleep(workerEndPoll) {
				e, stopped, err := r.Exit(ctx, handle(j))
				switch {
				case stopped:
					how = e.String()
				case errors.Is(err, workerruntime.ErrNotFound):
					how = "it was removed"
				}
				if stopped || err != nil || time.Now().After(deadline) {
					break
				}
			}
		}
	}
	if m.checkLive(ctx, j) { // orphans the journey when its worker is gone
		return nil
	}
	if !ran {
		return &Error{Code: CodeNotLive, Message: fmt.Sprintf(
			"the worker of journey %q has stopped: %s. The action did not run; spawn_worker with mode resume restarts the worker with its workspace", j.ID, how)}
	}
	// Not not_live, which promises the action did not run: a client
	// that resumes and retries on not_live must not run this one twice.
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf(
		"the worker of journey %q stopped while the action ran: %s. The action may have partly run; spawn_worker with mode resume restarts the worker with its workspace",
		j.ID, how)}
}

// How long workerEnded waits for a worker whose channel broke to be seen
// stopped, how often it asks, and how long its last question may take.
const (
	workerEndGrace = 2 * time.Second
	workerEndPoll  = 100 * time.Millisecond
	workerEndAsk   = 5 * time.Second
)

// errNoChannel marks an action that failed because no channel to its
// worker could be opened.
var errNoChannel = errors.New("the worker's channel could not be opened")

// openTo reports whether the journey has a channel to its current worker
// container whose session goes on and that no call has found broken. A
// worker that dies between that check and the call fails the call on the
// transport: the action is answered unavailable (it may have reached the
// worker), saying how the worker ended, and the journey orphaned
// (workerEnded).
func (m *Manager) openTo(j store.Journey) bool {
	m.mu.Lock()
	c := m.channels[j.UID]
	m.mu.Unlock()
	return c.liveTo(j.ContainerID)
}

func (m *Manager) dropChannelIf(uid uuid.UUID, c *channel) {
	m.mu.Lock()
	if m.channels[uid] == c {
		delete(m.channels, uid)
	}
	m.mu.Unlock()
	c.close()
}

func toolText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	if len(parts) == 0 {
		return "the worker reported an error without a message"
	}
	return strings.Join(parts, "\n")
}

// filterDenied drops, from a builtin worker's result, the listed files whose
// paths the gate would refuse (list entries, search matches, git status
// files): the action's own target was checked, the paths it reveals were not.
func filterDenied(g *gate.Gate, out any) any {
	obj, ok := out.(map[string]any)
	if !ok {
		return out
	}
	for _, key := range []string{"entries", "matches", "files"} {
		items, ok := obj[key].([]any)
		if !ok {
			continue
		}
		kept := items[:0]
		for _, it := range items {
			if m, ok := it.(map[string]any); ok {
				if p, ok := m["path"].(string); ok && g.PathDenied(p) {
					continue
				}
			}
			kept = append(kept, it)
		}
		obj[key] = kept
	}
	return obj
}

// frameLimit bounds one message from a worker. A read result carries the
// file twice (structured and as text), JSON-escaped (up to six bytes a
// byte), so it must fit the worker's largest file that way.
func frameLimit(d *meshtype.Definition) int {
	return max(16<<20, 12*int(d.Constraints.MaxFileSize)+1<<20)
}
