package journeys

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// agentResult is what mesh_execute returned, as the action's output.
type agentResult struct {
	SessionID string         `json:"session_id"`
	Output    string         `json:"output"`
	Metadata  map[string]any `json:"metadata"`
}

// agentTask turns an action into a task for an agent worker.
func agentTask(a *meshtype.Action) string {
	where := func(t string) string {
		if t == "" || t == "." {
			return "the workspace root"
		}
		return t
	}
	switch a.Type {
	case meshtype.ActionRead:
		return "Read " + a.Target
	case meshtype.ActionWrite:
		return fmt.Sprintf("Write the following content to %s, replacing the file if it exists:\n\n%s", a.Target, a.Content)
	case meshtype.ActionList:
		return "List the files in " + where(a.Target)
	case meshtype.ActionSearch:
		return fmt.Sprintf("Search for the regular expression %s in %s and report the matching lines", strconv.Quote(a.Pattern), where(a.Target))
	case meshtype.ActionExec:
		quoted := make([]string, len(a.Command))
		for i, arg := range a.Command {
			quoted[i] = strconv.Quote(arg)
		}
		return "Run the command [" + strings.Join(quoted, " ") + "] and report its output"
	case meshtype.ActionDelete:
		return "Delete " + a.Target
	}
	return a.Task
}

// runAgent runs an action as a task through mesh_execute in the journey's
// agent container, resuming the journey's agent session, and records the
// session the agent reports. mesh-exec stops the agent at timeout, before
// the marketplace gives up on the call (actionTimeouts), so a run that
// times out still returns its cost and session.
func (m *Manager) runAgent(ctx context.Context, j store.Journey, entry *workerdef.Entry, a *meshtype.Action, timeout time.Duration, toolCalls *[]meshtype.ToolDecision) (any, float64, error) {
	args := map[string]any{
		"repository": workerruntime.WorkspacePath,
		"task":       agentTask(a),
		"timeout":    timeout.Milliseconds(),
	}
	if j.AgentSessionID != "" {
		args["session_id"] = j.AgentSessionID
	}
	started := time.Now()
	res, err := m.callWorker(ctx, j, entry, "mesh_execute", args)
	var out agentResult
	if err == nil && res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err == nil {
			_ = json.Unmarshal(raw, &out)
		}
	}
	*toolCalls = parseToolCalls(out.Metadata)
	run := parseUsage(out.Metadata)
	run.OK = run.OK && err == nil && !res.IsError
	run.Duration = time.Since(started)
	m.observeAgentRun(ctx, entry, run)
	if err != nil {
		return nil, 0, err
	}
	cost := run.CostUSD
	kept, ok := keptSession(out.SessionID, j.AgentSessionID)
	if !ok {
		m.logger.WarnContext(ctx, "the worker reported a session id that is not an id; the journey keeps its session",
			slog.String("journey", j.UID.String()), slog.String("session_id", fmt.Sprintf("%.64q", out.SessionID)))
	}
	// The result names the session the journey goes on with, also when
	// the worker named none (it failed before its agent started one).
	out.SessionID = kept
	if out.SessionID != "" && out.SessionID != j.AgentSessionID {
		// Saved at once: the next action, or a restarted marketplace, resumes it.
		if err := m.cfg.Store.SetAgentSession(context.WithoutCancel(ctx), j.UID, out.SessionID); err != nil {
			return nil, cost, err
		}
	}
	if res.IsError {
		return nil, cost, &Error{Code: meshapi.CodeAgentFailed, Message: toolText(res)}
	}
	return out, cost, nil
}

// keptSession is the agent session a journey keeps after a run: the one
// the worker reported, or previous when it reported none, or something that
// is not an id (meshapi.ValidID, the shape mesh-exec's sessions have). The
// worker's answer is untrusted: its session id is stored and sent back
// with the next task. ok is false when the reported id is refused.
func keptSession(reported, previous string) (kept string, ok bool) {
	switch {
	case reported == "":
		return previous, true
	case !meshapi.ValidID(reported):
		return previous, false
	}
	return reported, true
}

// maxToolCalls bounds the tool calls one agent run may report for the
// audit log: a run has at most max_turns turns of a few calls each.
const maxToolCalls = 10_000

// parseToolCalls reads the gate's decisions on the agent's own tool calls
// from mesh_execute's metadata (tool_calls). Like the rest of the metadata
// it is the agent container's output: what does not decode is dropped, and
// texts are bounded.
func parseToolCalls(md map[string]any) []meshtype.ToolDecision {
	raw, err := json.Marshal(md["tool_calls"])
	if err != nil {
		return nil
	}
	var calls []meshtype.ToolDecision
	if json.Unmarshal(raw, &calls) != nil {
		return nil
	}
	out := make([]meshtype.ToolDecision, 0, min(len(calls), maxToolCalls))
	for _, c := range calls[:min(len(calls), maxToolCalls)] {
		r := meshtype.ToolDecision{Tool: textcut.Valid(c.Tool, 200), Summary: textcut.Valid(c.Summary, 1000), Allowed: c.Allowed}
		for _, v := range c.Violations {
			r.Violations = append(r.Violations, meshtype.Violation{ConstraintID: textcut.Valid(v.ConstraintID, 100), Violated: true, Message: textcut.Valid(v.Message, 4000)})
		}
		if !r.Allowed && len(r.Violations) == 0 {
			r.Violations = []meshtype.Violation{{ConstraintID: "agent_gate", Violated: true, Message: "refused by the gate in the worker"}}
		}
		out = append(out, r)
	}
	return out
}

// parseUsage reads what an agent run reported in mesh_execute's metadata:
// backend, is_error, cost_usd, num_turns, input_tokens, output_tokens. The
// metadata is the agent container's output, untrusted: a negative,
// non-finite or absurd number (telemetry.UsageOK) counts as not reported,
// zero.
func parseUsage(md map[string]any) telemetry.AgentRun {
	var r telemetry.AgentRun
	r.Backend, _ = md["backend"].(string)
	isError, _ := md["is_error"].(bool)
	r.OK = !isError
	r.CostUSD = amount(md["cost_usd"], telemetry.MaxAgentCostUSD)
	r.Turns = int64(amount(md["num_turns"], telemetry.MaxAgentTurns))
	r.InputTokens = int64(amount(md["input_tokens"], telemetry.MaxAgentTokens))
	r.OutputTokens = int64(amount(md["output_tokens"], telemetry.MaxAgentTokens))
	return r
}

// amount reads a reported number (JSON numbers decode as float64), at most
// limit; zero when it is not one.
func amount(v any, limit float64) float64 {
	f, ok := v.(float64)
	if !ok || !telemetry.UsageOK(f, limit) {
		return 0
	}
	return f
}

// observeAgentRun counts an agent run in the metrics and puts its usage on
// the action's span (invoke_agent). The backend label is the one the agent
// reported, mapped onto the known backends, or the definition's when the
// run reported nothing (it failed before mesh-exec answered).
func (m *Manager) observeAgentRun(ctx context.Context, entry *workerdef.Entry, run telemetry.AgentRun) {
	if run.Backend == "" && entry.Definition.Agent != nil {
		run.Backend = entry.Definition.Agent.Backend
	}
	run.Backend = telemetry.BoundBackend(run.Backend)
	m.metrics.agent.Observe(run)

	span := trace.SpanFromContext(ctx)
	span.SetAttributes(attrAgentBackend.String(run.Backend))
	if run.InputTokens > 0 {
		span.SetAttributes(telemetry.AttrUsageInputTokens.Int64(run.InputTokens))
	}
	if run.OutputTokens > 0 {
		span.SetAttributes(telemetry.AttrUsageOutputTokens.Int64(run.OutputTokens))
	}
	if run.CostUSD > 0 {
		span.SetAttributes(telemetry.AttrCostUSD.Float64(run.CostUSD))
	}
	if run.Turns > 0 {
		span.SetAttributes(telemetry.AttrNumTurns.Int64(run.Turns))
	}
}

// nestedAccess mints the token an agent uses to call the marketplace back:
// its caller is the parent's caller and journey ("alice/research"), so it
// sees only the journeys it spawns itself, each with its own container and
// gate. It returns the environment entry that hands mesh-exec the MCP config.
func (m *Manager) nestedAccess(ctx context.Context, caller string, j store.Journey) (string, error) {
	token, env, err := m.nestedConfig()
	if err != nil {
		return "", err
	}
	uid := j.UID
	// One live token per agent journey: a respawn's new container gets a new
	// one and the old one stops working.
	if err := m.cfg.Store.RevokeNested(ctx, uid); err != nil {
		return "", err
	}
	if err := m.cfg.Store.PutToken(ctx, caller+"/"+j.ID, bearer.Hash(token), &uid); err != nil {
		return "", err
	}
	return env, nil
}

// nestedConfig draws an agent's token for the marketplace and returns it
// with the environment entry that hands mesh-exec the MCP config carrying
// it. The caller stores the token's hash.
func (m *Manager) nestedConfig() (token, env string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", err
	}
	token = hex.EncodeToString(b)
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"meshwork": map[string]any{
		"type": "http", "url": m.cfg.NestedMCPURL, "headers": map[string]string{"Authorization": "Bearer " + token},
	}}})
	if err != nil {
		return "", "", err
	}
	return token, "MESH_EXEC_MCP_CONFIG_JSON=" + string(cfg), nil
}

// nestedAgent reports whether entry's workers get nested access.
func (m *Manager) nestedAgent(entry *workerdef.Entry) bool {
	return entry.Definition.Kind == meshtype.KindAgent && m.cfg.NestedMCPURL != ""
}
