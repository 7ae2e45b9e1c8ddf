package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mesh"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/meshexectest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// spansOf returns the ended spans that carry meshwork.run.id = runID.
func spansOf(rec *tracetest.SpanRecorder, runID string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if telemetrytest.Attrs(s.Attributes())[string(telemetry.AttrRunID)] == runID {
			out = append(out, s)
		}
	}
	return out
}

// A run is one trace: created inside a request's span, its nodes' spans are
// children of that span, their calls to mesh-exec (real MCP over HTTP)
// children of the node's, and the run's trace carries on after it waited
// for an approval, decided in another trace, on another replica than the
// one that started it.
func TestRunIsOneTrace(t *testing.T) {
	rec := telemetrytest.Record(t) // global: not parallel
	ctx := context.Background()
	pool := pgtest.Pool(t)
	// The real mesh-exec (on the fake claude), exporting its spans to a
	// collector of the test's.
	otlp := telemetrytest.NewCollector(t)
	meshExec := meshexectest.Start(t, meshexectest.Options{Env: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=mesh-exec",
	}})
	var logs telemetrytest.SyncBuffer
	meshEx, err := mesh.New(mesh.Config{Endpoint: meshExec.Endpoint, Token: meshExec.Token, Logger: telemetry.NewLogger(&logs, slog.LevelDebug)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = meshEx.Close() })
	executors := map[pipeline.Via]executor.Executor{pipeline.ViaMesh: meshEx}
	cat := loadTestCatalog(t)
	first := startEngine(t, pool, cat, executors, "first")

	reqCtx, req := telemetry.Tracer().Start(ctx, "POST /v1/runs", trace.WithSpanKind(trace.SpanKindServer))
	run, err := first.StartRun(reqCtx, engine.StartRequest{Pipeline: "approval"})
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	traceID := req.SpanContext().TraceID()
	if run.TraceID != traceID.String() {
		t.Fatalf("run trace_id %q, want the request's %s", run.TraceID, traceID)
	}
	v := waitStatus(t, first, run.ID, runstate.RunWaiting)

	// The replica that started the run goes; another decides and goes on.
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	second := startEngine(t, pool, cat, executors, "second")
	decCtx, dec := telemetry.Tracer().Start(ctx, "POST /v1/interrupts/{id}/resume", trace.WithSpanKind(trace.SpanKindServer))
	if _, err := second.Resume(decCtx, engine.ResumeRequest{InterruptID: v.Interrupts[0].ID, Value: json.RawMessage(`"approved"`)}); err != nil {
		t.Fatal(err)
	}
	dec.End()
	v = waitStatus(t, second, run.ID, runstate.RunSucceeded)
	if v.TraceID != traceID.String() {
		t.Errorf("GetRun's trace_id %q, want %s", v.TraceID, traceID)
	}
	for _, a := range v.Attempts {
		if a.NodeID == "publish" && !strings.HasPrefix(a.Replica, "second-") {
			t.Errorf("publish ran on %s, want the second replica", a.Replica)
		}
	}

	nodes := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spansOf(rec, run.ID) {
		id := telemetrytest.Attrs(s.Attributes())[string(telemetry.AttrNodeID)]
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q (node %s) is in trace %s, want the run's %s", s.Name(), id, s.SpanContext().TraceID(), traceID)
		}
		if id != "" {
			nodes[id] = s
		}
	}
	for id, name := range map[string]string{"draft": "invoke_agent a", "approve": "node approve", "publish": "invoke_agent a"} {
		s, ok := nodes[id]
		if !ok {
			t.Fatalf("no span of node %s; spans: %v", id, telemetrytest.Names(rec.Ended()))
		}
		if s.Name() != name {
			t.Errorf("node %s's span is %q, want %q", id, s.Name(), name)
		}
		if s.Parent().SpanID() != req.SpanContext().SpanID() {
			t.Errorf("node %s's span's parent is %s, want the request's span %s", id, s.Parent().SpanID(), req.SpanContext().SpanID())
		}
		if got := telemetrytest.Attrs(s.Attributes())[string(telemetry.AttrPipeline)]; got != "approval" {
			t.Errorf("node %s: meshwork.pipeline %q", id, got)
		}
	}
	publish := telemetrytest.Attrs(nodes["publish"].Attributes())
	if got := publish[string(telemetry.AttrConversationID)]; got == "" || got != v.Sessions["a"] {
		t.Errorf("publish's gen_ai.conversation.id %q, want the role's session %q", got, v.Sessions["a"])
	}
	if got := publish[string(telemetry.AttrNodeAttempt)]; got != "1" {
		t.Errorf("publish's meshwork.node.attempt %q", got)
	}
	links := nodes["approve"].Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != dec.SpanContext().SpanID() {
		t.Errorf("the approval's span links %v, want the deciding request's span", links)
	}

	// Each mesh_execute call: a client span under its node's span, and
	// mesh-exec's server span (exported by that process) its child in the
	// run's trace: the trace context travelled in _meta.
	agents := map[trace.SpanID]bool{nodes["draft"].SpanContext().SpanID(): true, nodes["publish"].SpanContext().SpanID(): true}
	clients := map[string]bool{}
	for _, s := range telemetrytest.Named(rec, "tools/call "+mesh.ToolName) {
		if s.SpanContext().TraceID() != traceID || s.SpanKind() != trace.SpanKindClient {
			t.Errorf("%s %s span in trace %s, want a client span in the run's", s.Name(), s.SpanKind(), s.SpanContext().TraceID())
			continue
		}
		if !agents[s.Parent().SpanID()] {
			t.Errorf("mesh_execute's client span's parent %s is no node span", s.Parent().SpanID())
		}
		clients[s.SpanContext().SpanID().String()] = true
	}
	if len(clients) != 2 {
		t.Fatalf("%d client mesh_execute spans, want 2", len(clients))
	}
	servers := func() (n int) {
		for _, s := range otlp.Spans() {
			if s.Service == "mesh-exec" && s.Kind == "SPAN_KIND_SERVER" && s.Name == "tools/call "+mesh.ToolName && s.TraceID == traceID.String() && clients[s.ParentID] {
				n++
			}
		}
		return n
	}
	eventually(t, "mesh-exec's server spans", func() bool { return servers() >= 2 })
	if n := servers(); n != 2 {
		t.Errorf("%d of mesh-exec's mesh_execute server spans are children of the client spans in the run's trace, want 2; its spans: %+v", n, otlp.Spans())
	}

	// The executor's log lines carry the node's trace.
	if !strings.Contains(logs.String(), `"trace_id":"`+traceID.String()+`"`) {
		t.Errorf("no log line of the run's trace:\n%s", logs.String())
	}
}

// Node outcomes reach the metrics (OnCommit → Metrics.Observe) with the
// catalog's names as labels, and a failed attempt's span is failed.
func TestNodeMetricsAndFailedSpans(t *testing.T) {
	rec := telemetrytest.Record(t) // global: not parallel
	pool := pgtest.Pool(t)
	reg := prometheus.NewRegistry()
	m := engine.NewMetrics(reg)
	flaky := 0
	var mu sync.Mutex
	ex := &enginetest.InstantExecutor{Record: true, Reply: func(req executor.Request) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if req.NodeID == "flaky" && flaky < 2 {
			flaky++
			return "", errors.New("rate limited")
		}
		return req.RoleName + ": " + req.Task, nil
	}}
	eng := startEngineConfig(t, engine.Config{
		Pool: pool, Catalog: loadTestCatalog(t), Executors: map[pipeline.Via]executor.Executor{pipeline.ViaMesh: ex},
		LeaseTTL: 3 * time.Second, OnCommit: m.Observe,
	})

	retried := start(t, eng, "retry", nil)
	looped := start(t, eng, "loop", nil) // review never asks for changes: revise is skipped
	waitStatus(t, eng, retried.ID, runstate.RunSucceeded)
	waitStatus(t, eng, looped.ID, runstate.RunSucceeded)

	for _, c := range []struct {
		pipeline, node, outcome string
		want                    int
	}{
		{"retry", "flaky", "retry", 2},
		{"retry", "flaky", "succeeded", 1},
		{"retry", "after", "succeeded", 1},
		{"loop", "write", "succeeded", 1},
		{"loop", "revise", "skipped", 1},
		{"loop", "done", "succeeded", 1},
	} {
		if got := histogramCount(t, reg, c.pipeline, c.node, c.outcome); got != c.want {
			t.Errorf("meshwork_node_duration_seconds{%s,%s,%s} count %d, want %d", c.pipeline, c.node, c.outcome, got, c.want)
		}
	}
	want := `
# HELP meshwork_node_retries_total Node attempts after the first, by pipeline and node.
# TYPE meshwork_node_retries_total counter
meshwork_node_retries_total{node="flaky",pipeline="retry"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshwork_node_retries_total"); err != nil {
		t.Error(err)
	}

	var failed []sdktrace.ReadOnlySpan
	for _, s := range spansOf(rec, retried.ID) {
		if a := telemetrytest.Attrs(s.Attributes()); a[string(telemetry.AttrNodeID)] == "flaky" {
			if s.Status().Code == codes.Error {
				failed = append(failed, s)
			} else if a[string(telemetry.AttrNodeAttempt)] != "3" {
				t.Errorf("flaky's attempt %s span is not failed", a[string(telemetry.AttrNodeAttempt)])
			}
		}
	}
	if len(failed) != 2 {
		t.Fatalf("%d failed spans of flaky, want 2 (attempts 1 and 2)", len(failed))
	}
	for _, s := range failed {
		if a := telemetrytest.Attrs(s.Attributes()); a[string(telemetry.AttrErrorType)] != "node_error" || a["meshwork.node.outcome"] != "retry" || !strings.Contains(s.Status().Description, "rate limited") {
			t.Errorf("failed attempt span: status %v, attributes %v", s.Status(), s.Attributes())
		}
	}
	var skipped bool
	for _, s := range spansOf(rec, looped.ID) {
		skipped = skipped || (s.Name() == "node revise" && telemetrytest.Attrs(s.Attributes())["meshwork.node.outcome"] == "skipped")
	}
	if !skipped {
		t.Errorf("no span of the skipped node revise; spans: %v", telemetrytest.Names(rec.Ended()))
	}
}

// histogramCount is the number of observations of
// meshwork_node_duration_seconds with these labels.
func histogramCount(t *testing.T, reg *prometheus.Registry, pipelineName, node, outcome string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshwork_node_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pipeline"] == pipelineName && labels["node"] == node && labels["outcome"] == outcome {
				return int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}
