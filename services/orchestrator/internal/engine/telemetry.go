package engine

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Span attributes of the engine's own, beside telemetry's.
const (
	attrRoleVia       = attribute.Key("meshwork.role.via")
	attrNodeType      = attribute.Key("meshwork.node.type")
	attrNodeIteration = attribute.Key("meshwork.node.iteration")
	// attrNodeOutcome is a node span's CommitInfo.Status: succeeded,
	// failed, retry or skipped.
	attrNodeOutcome = attribute.Key("meshwork.node.outcome")
)

// The outcomes of a node attempt, as CommitInfo.Status and the outcome
// label of meshwork_node_duration_seconds.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeRetry     = "retry"
	outcomeSkipped   = "skipped"
)

// runTrace returns ctx whose parent span is the run's stored trace context:
// the spans of a run's nodes are children of the request that created it,
// whichever replica works them and however much later (after a crash, a
// takeover or an approval). A run with no stored context (created before
// runs had one) leaves ctx as it is.
func runTrace(ctx context.Context, run store.Run) context.Context {
	return telemetry.WithTraceContext(ctx, run.Traceparent, run.Tracestate)
}

// linkRunTrace links ctx's span to run's trace, when the run has one (runs
// created before traces were stored have none, and runTrace would then
// return ctx itself: a span linked to itself).
func linkRunTrace(ctx context.Context, run store.Run) {
	if run.Traceparent == "" {
		return
	}
	if sc := trace.SpanContextFromContext(runTrace(context.Background(), run)); sc.IsValid() {
		trace.SpanFromContext(ctx).AddLink(trace.Link{SpanContext: sc})
	}
}

// startNodeSpan starts the span of one attempt of node a.NodeID, in the
// run's trace: "invoke_agent {role}" for an agent node, "node {id}" for any
// other. session is the role's session when known.
func startNodeSpan(ctx context.Context, run store.Run, p *pipeline.Pipeline, a nodeArgs, session string) (context.Context, trace.Span) {
	ctx = runTrace(ctx, run)
	attrs := []attribute.KeyValue{
		telemetry.AttrRunID.String(run.ID), telemetry.AttrPipeline.String(p.Name()), telemetry.AttrNodeID.String(a.NodeID),
		telemetry.AttrNodeAttempt.Int(a.Attempt), attrNodeIteration.Int(a.Iteration),
	}
	n, _ := p.Node(a.NodeID)
	role, isAgent := p.Role(a.NodeID)
	if n == nil || !isAgent {
		return telemetry.Tracer().Start(ctx, "node "+a.NodeID, trace.WithAttributes(attrs...))
	}
	attrs = append(attrs, attrNodeType.String(string(pipeline.TypeAgent)), attrRoleVia.String(string(role.Via)))
	attrs = append(attrs, telemetry.NonEmpty(
		telemetry.AttrConversationID.String(session),
		telemetry.AttrRequestModel.String(role.Model),
		telemetry.AttrWorkerID.String(role.Worker),
	)...)
	return telemetry.StartAgent(ctx, n.Role, attrs...)
}

// errorType classes a node's failure for its span's error.type, with few
// values: the error's text, which may be anything an agent said, goes in
// the span's status and event instead.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, executor.ErrUnavailable):
		return "executor_unavailable"
	default:
		return "node_error"
	}
}

// reportSkipped reports the nodes a committed step skipped (their `when`
// was false, or a node they need was skipped): a span "node {id}" of no
// length under ctx's span, so a trace shows why a node did not run, and a
// CommitInfo to OnCommit.
func (e *Engine) reportSkipped(ctx context.Context, p *pipeline.Pipeline, runID, causeNode string, step runstate.Step) {
	for id, ns := range step.Delta.Nodes {
		if id == causeNode || ns.Status != pipeline.StatusSkipped {
			continue
		}
		_, span := telemetry.Tracer().Start(ctx, "node "+id, trace.WithAttributes(
			telemetry.AttrRunID.String(runID), telemetry.AttrPipeline.String(p.Name()), telemetry.AttrNodeID.String(id),
			attrNodeOutcome.String(outcomeSkipped)))
		span.End()
		e.onCommit(CommitInfo{RunID: runID, Pipeline: p.Name(), NodeID: id, Status: outcomeSkipped, RunStatus: step.Status})
	}
}

// reportApproval reports an approval node resumed: a span "node {id}" in
// the run's trace from the moment the interrupt opened to its decision
// (the wait for a person), linked to the request that decided, and a
// CommitInfo whose Duration is that wait.
// The nodes the decision skipped are reported under that span.
func (e *Engine) reportApproval(ctx context.Context, run store.Run, p *pipeline.Pipeline, in store.Interrupt, step runstate.Step) {
	now := time.Now()
	spanCtx, span := telemetry.Tracer().Start(runTrace(ctx, run), "node "+in.NodeID,
		trace.WithTimestamp(in.CreatedAt),
		trace.WithLinks(trace.LinkFromContext(ctx)),
		trace.WithAttributes(
			telemetry.AttrRunID.String(run.ID), telemetry.AttrPipeline.String(p.Name()), telemetry.AttrNodeID.String(in.NodeID),
			attrNodeIteration.Int(in.Iteration), attrNodeType.String(string(pipeline.TypeApproval)), attrNodeOutcome.String(outcomeSucceeded)))
	span.End(trace.WithTimestamp(now))
	e.onCommit(CommitInfo{
		RunID: run.ID, Pipeline: p.Name(), NodeID: in.NodeID, Status: outcomeSucceeded, RunStatus: step.Status,
		Attempt: 1, Duration: now.Sub(in.CreatedAt),
	})
	e.reportSkipped(spanCtx, p, run.ID, in.NodeID, step)
}

func (e *Engine) onCommit(info CommitInfo) {
	if e.cfg.OnCommit != nil {
		e.cfg.OnCommit(info)
	}
}

// Metrics are the engine's Prometheus metrics of node outcomes, fed by
// OnCommit (Config.OnCommit = m.Observe). Their labels are the names of
// pipelines and nodes of the catalog, never anything a caller sent, so
// their series are bounded by the pipelines loaded.
type Metrics struct {
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
}

// NewMetrics registers on reg:
//
//   - meshwork_node_duration_seconds{pipeline, node, outcome}: each node
//     attempt's time, by outcome: succeeded, failed (for good), retry (failed,
//     to be retried) or skipped (of no length; counts the nodes skipped). An
//     approval node's time is its wait for the decision.
//   - meshwork_node_retries_total{pipeline, node}: attempts after a node's
//     first.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshwork_node_duration_seconds",
			Help: "Time of each node attempt, by pipeline, node and outcome (succeeded, failed, retry, skipped); an approval's is its wait.",
			// Agents take seconds to many minutes; approvals may wait hours.
			Buckets: []float64{0.05, 0.25, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600},
		}, []string{"pipeline", "node", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwork_node_retries_total",
			Help: "Node attempts after the first, by pipeline and node.",
		}, []string{"pipeline", "node"}),
	}
	reg.MustRegister(m.duration, m.retries)
	return m
}

// Prepare starts the retry counters of every node of the catalog's
// pipelines at zero, so a dashboard shows "no retries" rather than no data
// (a labelled series exists only once it has been touched).
func (m *Metrics) Prepare(catalog *pipeline.Catalog) {
	for _, p := range catalog.Pipelines() {
		for _, id := range p.Order() {
			m.retries.WithLabelValues(p.Name(), id)
		}
	}
}

// Observe records one committed node outcome; it is an OnCommit hook.
func (m *Metrics) Observe(c CommitInfo) {
	m.duration.WithLabelValues(c.Pipeline, c.NodeID, c.Status).Observe(c.Duration.Seconds())
	if c.Attempt > 1 {
		m.retries.WithLabelValues(c.Pipeline, c.NodeID).Inc()
	}
}
