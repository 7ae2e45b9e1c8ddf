package telemetry

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/textcut"
)

// Attribute keys of the OpenTelemetry GenAI and MCP conventions, and
// Meshwork's own (meshwork.*), shared so that dashboards and trace queries
// can rely on one spelling.
const (
	AttrOperationName     = attribute.Key("gen_ai.operation.name")
	AttrAgentName         = attribute.Key("gen_ai.agent.name")
	AttrConversationID    = attribute.Key("gen_ai.conversation.id")
	AttrProviderName      = attribute.Key("gen_ai.provider.name")
	AttrRequestModel      = attribute.Key("gen_ai.request.model")
	AttrToolName          = attribute.Key("gen_ai.tool.name")
	AttrToolCallID        = attribute.Key("gen_ai.tool.call.id")
	AttrUsageInputTokens  = attribute.Key("gen_ai.usage.input_tokens")
	AttrUsageOutputTokens = attribute.Key("gen_ai.usage.output_tokens")
	AttrMCPMethodName     = attribute.Key("mcp.method.name")
	AttrMCPSessionID      = attribute.Key("mcp.session.id")
	AttrErrorType         = attribute.Key("error.type")

	AttrCostUSD        = attribute.Key("meshwork.cost_usd")
	AttrNumTurns       = attribute.Key("meshwork.num_turns")
	AttrJourneyID      = attribute.Key("meshwork.journey.id")
	AttrWorkerID       = attribute.Key("meshwork.worker.id")
	AttrActionType     = attribute.Key("meshwork.action.type")
	AttrGateDecision   = attribute.Key("meshwork.gate.decision")
	AttrGateViolations = attribute.Key("meshwork.gate.violations")
	AttrRunID          = attribute.Key("meshwork.run.id")
	AttrPipeline       = attribute.Key("meshwork.pipeline")
	AttrNodeID         = attribute.Key("meshwork.node.id")
	AttrNodeAttempt    = attribute.Key("meshwork.node.attempt")
)

// gen_ai.operation.name values.
const (
	OperationInvokeAgent = "invoke_agent"
	OperationExecuteTool = "execute_tool"
)

// EventGateDecision is the name of the span event recording a constraint
// gate's decision, with AttrGateDecision ("allow" or "refuse") and
// AttrGateViolations (the violated constraints' ids).
const EventGateDecision = "meshwork.gate.decision"

// Tracer is Meshwork's tracer, from the global provider Setup installs.
func Tracer() trace.Tracer { return otel.Tracer("github.com/meshwork/meshwork") }

// StartAgent starts the span of one agent invocation, "invoke_agent
// {agent}" (agent: a role, a backend such as "claude", or a worker).
func StartAgent(ctx context.Context, agent string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append([]attribute.KeyValue{AttrOperationName.String(OperationInvokeAgent), AttrAgentName.String(agent)}, attrs...)
	return Tracer().Start(ctx, OperationInvokeAgent+" "+agent, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// StartTool starts the span of one tool execution, "execute_tool {tool}":
// an action in a worker, or a tool the agent used.
func StartTool(ctx context.Context, tool string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append([]attribute.KeyValue{AttrOperationName.String(OperationExecuteTool), AttrToolName.String(tool)}, attrs...)
	return Tracer().Start(ctx, OperationExecuteTool+" "+tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// NonEmpty returns kvs without the string attributes whose value is empty:
// for a span's optional attributes (a conversation id known only on a
// resumed session, a model left to the agent's default, the worker of a
// role that runs in none), which are left off rather than recorded empty.
func NonEmpty(kvs ...attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		if kv.Value.Type() == attribute.STRING && kv.Value.AsString() == "" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// RecordUsage puts an agent run's usage on its span.
func RecordUsage(span trace.Span, inputTokens, outputTokens int64, costUSD float64, turns int) {
	span.SetAttributes(AttrUsageInputTokens.Int64(inputTokens), AttrUsageOutputTokens.Int64(outputTokens),
		AttrCostUSD.Float64(costUSD), AttrNumTurns.Int(turns))
}

// RecordGateDecision adds the gate's decision to span as an event, with the
// ids of the constraints it violated (none when allowed).
func RecordGateDecision(span trace.Span, allowed bool, violations []string) {
	decision := "allow"
	if !allowed {
		decision = "refuse"
	}
	span.AddEvent(EventGateDecision, trace.WithAttributes(AttrGateDecision.String(decision), AttrGateViolations.StringSlice(violations)))
	span.SetAttributes(AttrGateDecision.String(decision))
}

// Fail marks span failed with err and an error.type (a short, low
// cardinality class such as "timeout" or "tool_error"). The message is cut
// to maxErrorText bytes: errors carry agent output, and a span's status is
// not bounded by the attribute limits.
func Fail(span trace.Span, err error, errorType string) {
	if err != nil {
		msg := Truncate(err.Error(), maxErrorText)
		span.AddEvent("exception", trace.WithAttributes(
			attribute.String("exception.type", errorType), attribute.String("exception.message", msg)))
		span.SetStatus(codes.Error, msg)
	} else {
		span.SetStatus(codes.Error, errorType)
	}
	span.SetAttributes(AttrErrorType.String(errorType))
}

// maxErrorText bounds the error text on a span.
const maxErrorText = 512

// Truncate cuts s to at most n bytes, at a UTF-8 character boundary, and
// replaces invalid UTF-8: for untrusted text (agent output, a client's tool
// name) put on spans and logs.
func Truncate(s string, n int) string {
	return textcut.Valid(s, n)
}

// TraceContext returns the W3C traceparent and tracestate of the span in
// ctx ("" when there is none), for storing a trace that must outlive the
// process, such as a pipeline run's.
func TraceContext(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// WithTraceContext returns ctx whose remote parent is the stored
// traceparent and tracestate; ctx unchanged if traceparent is not valid.
func WithTraceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	if strings.TrimSpace(traceparent) == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}
