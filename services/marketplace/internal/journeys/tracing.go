package journeys

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// Attribute keys of the marketplace's own spans, beside pkg/telemetry's.
const (
	// attrSpawnOutcome is spawn_worker's outcome: "active" (spawned),
	// "already_active" (a normal spawn found it running) or "error".
	attrSpawnOutcome = attribute.Key("meshwork.spawn.outcome")
	// attrSpawnPooled: the worker came from its warm pool.
	attrSpawnPooled = attribute.Key("meshwork.spawn.pooled")
	// attrSpawnMode is spawn_worker's mode: normal, resume or fresh.
	attrSpawnMode = attribute.Key("meshwork.spawn.mode")
	// attrContainerID is the OpenTelemetry resource convention's key, used
	// here on the span that created the container.
	attrContainerID = attribute.Key("container.id")
	// attrAgentBackend is the agent backend that ran an agent action
	// (claude, codex, opencode, gemini, command or other).
	attrAgentBackend = attribute.Key("meshwork.agent.backend")
)

// errorTypeRefused is the error.type of an action the gate refused: the
// caller's request failed, by the worker's policy, not by a fault.
const errorTypeRefused = "gate_refused"

// startAction starts the span of one execute_in_worker action: "invoke_agent
// {worker}" for an agent worker (the action becomes an agent run),
// "execute_tool {action type}" for the others. Both names are bounded: a
// catalog id or an action type ("invalid" when it did not decode).
func startAction(ctx context.Context, j store.Journey, entry *workerdef.Entry, actionType string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		telemetry.AttrJourneyID.String(j.ID),
		telemetry.AttrWorkerID.String(entry.Definition.ID),
		telemetry.AttrActionType.String(actionType),
	}
	if entry.Definition.Kind == meshtype.KindAgent {
		if j.AgentSessionID != "" {
			attrs = append(attrs, telemetry.AttrConversationID.String(j.AgentSessionID))
		}
		return telemetry.StartAgent(ctx, entry.Definition.ID, attrs...)
	}
	return telemetry.StartTool(ctx, actionType, attrs...)
}

// startSpawn starts the span of one spawn, "spawn_worker {worker}", named
// after the catalog id the request resolved to.
func startSpawn(ctx context.Context, journeyID, workerID, mode string) (context.Context, trace.Span) {
	return telemetry.Tracer().Start(ctx, "spawn_worker "+workerID, trace.WithAttributes(
		telemetry.AttrJourneyID.String(journeyID),
		telemetry.AttrWorkerID.String(workerID),
		attrSpawnMode.String(mode),
	))
}

// traceID is the trace id of span for the audit log, or "" when there is
// no trace.
func traceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

func violationIDs(vs []meshtype.Violation) []string {
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = v.ConstraintID
	}
	return ids
}

// errorType classes a failure for error.type, from a fixed set: the
// Error codes, the channel's and the context's failures, or "internal".
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, errChannelBroken):
		return "channel_broken"
	}
	if e, ok := AsError(err); ok {
		return string(e.Code)
	}
	return "internal"
}
