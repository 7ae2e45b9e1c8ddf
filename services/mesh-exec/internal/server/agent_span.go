package server

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/runner"
)

// Bounds on what agent output puts in a trace. Tool names, call ids and
// session ids come from the agent's stream, which is untrusted: a span name
// or attribute built from one must not grow with it.
const (
	maxToolName  = 64   // bytes of a tool's name in "execute_tool {tool}"
	maxAttrValue = 256  // bytes of an id or an error description
	maxToolSpans = 1000 // tool spans per run; the rest are only counted
)

// attrToolSpansDropped is set on an agent span whose run made more tool
// calls than it got spans for.
const attrToolSpansDropped = attribute.Key("meshwork.agent.tool_spans_dropped")

// agentSpan traces one agent run: the "invoke_agent {backend}" span and,
// under it, an "execute_tool {tool}" span for each tool call in the agent's
// stream, from its tool_use event to its tool_result. The runner calls
// onEvent on the run's own goroutine, so an agentSpan needs no lock.
type agentSpan struct {
	ctx          context.Context //nolint:containedctx // the invoke_agent span's, parent of the tool spans; lives as long as the run
	span         trace.Span
	conversation string
	open         []openTool // in call order
	started      int
	dropped      int
}

// openTool is a tool call still waiting for its result.
type openTool struct {
	id, name string
	span     trace.Span
}

// startAgentSpan starts the span of a run of backendName; sessionID is the
// session a resume continues ("" for a new one).
func startAgentSpan(ctx context.Context, backendName, model, sessionID string) (context.Context, *agentSpan) {
	attrs := []attribute.KeyValue{telemetry.AttrProviderName.String(provider(backendName))}
	if model != "" {
		attrs = append(attrs, telemetry.AttrRequestModel.String(model))
	}
	ctx, span := telemetry.StartAgent(ctx, backendName, attrs...)
	a := &agentSpan{ctx: ctx, span: span}
	a.session(sessionID)
	return ctx, a
}

// provider is gen_ai.provider.name for a backend: the vendor of the models a
// known CLI talks to, else the backend's name (OpenCode and a user's own
// command may talk to anyone).
func provider(backendName string) string {
	switch backendName {
	case "claude":
		return "anthropic"
	case "codex":
		return "openai"
	case "gemini":
		return "google"
	}
	return backendName
}

// event follows one event of the agent's stream.
func (a *agentSpan) event(ev backend.Event) {
	a.session(ev.SessionID)
	switch ev.Kind {
	case backend.KindToolUse:
		a.toolUse(ev)
	case backend.KindToolResult:
		a.toolResult(ev)
	}
}

// session records the conversation (the agent's session) as soon as the
// agent names it.
func (a *agentSpan) session(id string) {
	if id == "" || id == a.conversation {
		return
	}
	a.conversation = id
	a.span.SetAttributes(telemetry.AttrConversationID.String(telemetry.Truncate(id, maxAttrValue)))
}

func (a *agentSpan) toolUse(ev backend.Event) {
	if a.started >= maxToolSpans {
		a.dropped++
		return
	}
	a.started++
	name := telemetry.Truncate(ev.Tool, maxToolName)
	if name == "" {
		name = "unknown"
	}
	var attrs []attribute.KeyValue
	if ev.ToolCallID != "" {
		attrs = append(attrs, telemetry.AttrToolCallID.String(telemetry.Truncate(ev.ToolCallID, maxAttrValue)))
	}
	_, span := telemetry.StartTool(a.ctx, name, attrs...)
	a.open = append(a.open, openTool{id: ev.ToolCallID, name: ev.Tool, span: span})
}

// toolResult ends the span of the call the result answers: the one with its
// call id, or, when the CLI gives no ids, the oldest open call of the same
// tool.
func (a *agentSpan) toolResult(ev backend.Event) {
	i := -1
	for j, t := range a.open {
		if (ev.ToolCallID != "" && t.id == ev.ToolCallID) || (ev.ToolCallID == "" && t.id == "" && t.name == ev.Tool) {
			i = j
			break
		}
	}
	if i < 0 {
		return
	}
	t := a.open[i]
	a.open = append(a.open[:i], a.open[i+1:]...)
	if ev.IsError {
		telemetry.Fail(t.span, nil, "tool_error")
	}
	t.span.End()
}

// finish ends the run's spans. errorType is "" for a successful run, else
// what failureType says; cause explains it (nil: the result's output does).
// Tool calls still open end with the run, failing with it when it failed.
func (a *agentSpan) finish(res backend.Result, errorType string, cause error) {
	a.session(res.SessionID)
	telemetry.RecordUsage(a.span, res.InputTokens, res.OutputTokens, res.CostUSD, res.NumTurns)
	if a.dropped > 0 {
		a.span.SetAttributes(attrToolSpansDropped.Int(a.dropped))
	}
	for _, t := range a.open {
		if errorType != "" {
			telemetry.Fail(t.span, nil, errorType)
		}
		t.span.End()
	}
	a.open = nil
	if errorType != "" {
		if cause == nil && res.Output != "" {
			cause = errors.New(telemetry.Truncate(res.Output, maxAttrValue))
		}
		telemetry.Fail(a.span, cause, errorType)
	}
	a.span.End()
}

// failureType classifies a run for error.type and the outcome label: ""
// when it succeeded, else one of a few fixed words (never agent output).
func failureType(res backend.Result, out runner.Outcome, err error) string {
	switch {
	case errors.Is(err, runner.ErrBinaryNotFound):
		return "binary_not_found"
	case err != nil:
		return "run_failed"
	case out.Stopped == "timeout":
		return "timeout"
	case out.Stopped != "":
		return "canceled"
	case errors.Is(res.Err, backend.ErrNotLoggedIn):
		return "not_logged_in"
	case errors.Is(res.Err, backend.ErrSessionNotFound):
		return "session_not_found"
	case res.IsError:
		return "agent_error"
	}
	return ""
}
