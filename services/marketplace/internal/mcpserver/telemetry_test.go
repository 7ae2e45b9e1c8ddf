package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/workers"
)

// spans are the ended spans of one trace.
type spans []sdktrace.ReadOnlySpan

func inTrace(rec *tracetest.SpanRecorder, id trace.TraceID) spans {
	var out spans
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// find returns the span named name of that kind, failing the test if there
// is none.
func (ss spans) find(t *testing.T, name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range ss {
		if s.Name() == name && s.SpanKind() == kind {
			return s
		}
	}
	t.Fatalf("no %s span %q in the trace; it has %v", kind, name, telemetrytest.Names(ss))
	return nil
}

// waitSpan waits for a span that ends after the client has its answer (the
// HTTP server's, which ends once the response is written).
func waitSpan(t *testing.T, rec *tracetest.SpanRecorder, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range rec.Ended() {
			if match(s) {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the span did not end")
	return nil
}

func gateEvent(t *testing.T, s sdktrace.ReadOnlySpan) (decision string, violations []string) {
	t.Helper()
	for _, e := range s.Events() {
		if e.Name != telemetry.EventGateDecision {
			continue
		}
		for _, kv := range e.Attributes {
			switch kv.Key {
			case telemetry.AttrGateDecision:
				decision = kv.Value.AsString()
			case telemetry.AttrGateViolations:
				violations = kv.Value.AsStringSlice()
			}
		}
		return decision, violations
	}
	t.Fatalf("span %q has no %s event", s.Name(), telemetry.EventGateDecision)
	return "", nil
}

// One trace from an MCP client, through the marketplace's server span and
// the action's span with the gate's decision, to the call on the worker's
// channel; a refused action's trace ends at the gate. The audit rows carry
// the traces' ids. Over HTTP, a client that sends no trace context gets the
// HTTP request's span as the parent of its call.
func TestExecuteInWorkerTraces(t *testing.T) {
	rec := telemetrytest.Record(t) // global: not parallel, so it runs before the parallel tests
	b := setup(t)
	cs := b.client(t, aliceToken, telemetry.ClientMiddleware())
	ctx := context.Background()

	spawnCtx, spawnRoot := telemetry.Tracer().Start(ctx, "test spawn")
	sp := callCtx(spawnCtx, t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "traced"})
	spawnRoot.End()
	spawn := inTrace(rec, spawnRoot.SpanContext().TraceID()).find(t, "spawn_worker filesystem_write_v1", trace.SpanKindInternal)
	if telemetrytest.Attr(spawn, "meshwork.spawn.outcome").AsString() != "active" || telemetrytest.Attr(spawn, "container.id").AsString() != sp["container_id"] ||
		telemetrytest.Attr(spawn, telemetry.AttrJourneyID).AsString() != "traced" {
		t.Errorf("spawn span attributes %v, want outcome active and container %v", spawn.Attributes(), sp["container_id"])
	}

	// Allowed.
	allowCtx, allowRoot := telemetry.Tracer().Start(ctx, "test allowed")
	if r := callCtx(allowCtx, t, cs, "execute_in_worker", execArgs("traced", map[string]any{"type": "write", "target": "a.txt", "content": "x"})); r["executed"] != true {
		t.Fatalf("write: %v", r)
	}
	allowRoot.End()
	allowed := inTrace(rec, allowRoot.SpanContext().TraceID())
	client := allowed.find(t, "tools/call execute_in_worker", trace.SpanKindClient)
	server := allowed.find(t, "tools/call execute_in_worker", trace.SpanKindServer)
	action := allowed.find(t, "execute_tool write", trace.SpanKindInternal)
	worker := allowed.find(t, "tools/call write", trace.SpanKindClient)
	for _, link := range []struct{ child, parent sdktrace.ReadOnlySpan }{{server, client}, {action, server}, {worker, action}} {
		if link.child.Parent().SpanID() != link.parent.SpanContext().SpanID() {
			t.Errorf("span %q (%s): parent %s, want %q %s", link.child.Name(), link.child.SpanKind(),
				link.child.Parent().SpanID(), link.parent.Name(), link.parent.SpanContext().SpanID())
		}
	}
	for key, want := range map[attribute.Key]string{
		telemetry.AttrJourneyID: "traced", telemetry.AttrWorkerID: "filesystem_write_v1", telemetry.AttrActionType: "write",
		telemetry.AttrGateDecision: "allow",
	} {
		if got := telemetrytest.Attr(action, key).AsString(); got != want {
			t.Errorf("action span %s = %q, want %q", key, got, want)
		}
	}
	if d, vs := gateEvent(t, action); d != "allow" || len(vs) != 0 {
		t.Errorf("allowed action's gate event: %s %v", d, vs)
	}

	// Refused: the event names the violated constraints, and the trace
	// never reaches the worker.
	execs := b.rt.execs.Load()
	refuseCtx, refuseRoot := telemetry.Tracer().Start(ctx, "test refused")
	res, err := cs.CallTool(refuseCtx, toolParams("execute_in_worker", execArgs("traced", map[string]any{"type": "read", "target": "../../etc/passwd"})))
	refuseRoot.End()
	if err != nil || !res.IsError {
		t.Fatalf("refused read: %v %+v", err, res)
	}
	refused := inTrace(rec, refuseRoot.SpanContext().TraceID())
	refusal := refused.find(t, "execute_tool read", trace.SpanKindInternal)
	if d, vs := gateEvent(t, refusal); d != "refuse" || !slices.Equal(vs, []string{"path_safety"}) {
		t.Errorf("refused action's gate event: %s %v, want refuse [path_safety]", d, vs)
	}
	if refusal.Status().Code != codes.Error || telemetrytest.Attr(refusal, telemetry.AttrErrorType).AsString() != "gate_refused" {
		t.Errorf("refused action's span: status %v, error.type %v", refusal.Status(), telemetrytest.Attr(refusal, telemetry.AttrErrorType))
	}
	for _, s := range refused {
		if s.SpanKind() == trace.SpanKindClient && s.Name() != "tools/call execute_in_worker" {
			t.Errorf("the refused action's trace has a call to the worker: %q", s.Name())
		}
	}
	if b.rt.execs.Load() != execs {
		t.Error("the worker was called for a refused action")
	}

	j, err := b.store.Journey(ctx, "alice", "traced")
	if err != nil {
		t.Fatal(err)
	}
	audit, err := b.store.Actions(ctx, j.UID)
	if err != nil || len(audit) != 2 {
		t.Fatalf("audit rows: %v %v", audit, err)
	}
	if got, want := audit[0].TraceID, action.SpanContext().TraceID().String(); got != want || audit[0].Decision != store.DecisionAllowed {
		t.Errorf("allowed action's audit trace_id %q, want %q", got, want)
	}
	if got, want := audit[1].TraceID, refusal.SpanContext().TraceID().String(); got != want || audit[1].Decision != store.DecisionRefused {
		t.Errorf("refused action's audit trace_id %q, want %q", got, want)
	}

	// A client without trace context: the call's span is a child of the
	// HTTP request's ("POST /mcp"), not of the request that opened the
	// session.
	plain := b.client(t, aliceToken)
	must(t, plain, "execute_in_worker", execArgs("traced", map[string]any{"type": "read", "target": "a.txt"}))
	var plainServer sdktrace.ReadOnlySpan // the last one to end
	for _, s := range telemetrytest.Named(rec, "tools/call execute_in_worker") {
		if s.SpanKind() == trace.SpanKindServer {
			plainServer = s
		}
	}
	if plainServer == nil {
		t.Fatal("no server span for the call without trace context")
	}
	post := waitSpan(t, rec, func(s sdktrace.ReadOnlySpan) bool { return s.SpanContext().SpanID() == plainServer.Parent().SpanID() })
	if post.Name() != "POST /mcp" || post.SpanKind() != trace.SpanKindServer || post.SpanContext().TraceID() != plainServer.SpanContext().TraceID() {
		t.Errorf("the call's parent is %q (%s), want the HTTP server span POST /mcp", post.Name(), post.SpanKind())
	}
	// Its own request's, which encloses it, not the one that opened the
	// session (initialize), which ended before.
	if post.StartTime().After(plainServer.StartTime()) || post.EndTime().Before(plainServer.EndTime()) {
		t.Errorf("the call's parent POST /mcp (%v to %v) does not enclose the call (%v to %v)",
			post.StartTime(), post.EndTime(), plainServer.StartTime(), plainServer.EndTime())
	}
	inTrace(rec, post.SpanContext().TraceID()).find(t, "execute_tool read", trace.SpanKindInternal)
	// The server's name, not the client's Host header.
	if addr, port := telemetrytest.Attr(post, "server.address").AsString(), telemetrytest.Attr(post, "server.port").AsInt64(); addr != "marketplace" || port != 8080 {
		t.Errorf("POST /mcp has server.address %q, server.port %d; want marketplace, 8080", addr, port)
	}

	// The probes and the scrapes are not traced.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	for _, s := range rec.Ended() {
		if strings.Contains(s.Name(), "healthz") || strings.Contains(s.Name(), "readyz") || strings.Contains(s.Name(), "metrics") {
			t.Errorf("span %q: the probes and scrapes are traced", s.Name())
		}
	}
}

// An agent action is an invoke_agent span with the run's usage, its call to
// mesh_execute continues the trace, and the run is counted in the agent
// metrics with bounded labels.
func TestAgentActionTraceAndMetrics(t *testing.T) {
	rec := telemetrytest.Record(t) // global: not parallel, so it runs before the parallel tests
	b := setupAgent(t, false)
	cs := b.client(t, aliceToken, telemetry.ClientMiddleware())
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "claude_code_assistant_v1", "journey_id": "agent"})

	ctx, root := telemetry.Tracer().Start(context.Background(), "test agent")
	out := callCtx(ctx, t, cs, "execute_in_worker", execArgs("agent", map[string]any{"type": "task", "task": "Summarise the repository"}))
	root.End()
	md, _ := out["output"].(map[string]any)["metadata"].(map[string]any)
	cost, _ := md["cost_usd"].(float64)
	if out["executed"] != true || cost <= 0 {
		t.Fatalf("agent action: %v", out)
	}
	tr := inTrace(rec, root.SpanContext().TraceID())
	agent := tr.find(t, "invoke_agent claude_code_assistant_v1", trace.SpanKindInternal)
	call := tr.find(t, "tools/call mesh_execute", trace.SpanKindClient)
	if call.Parent().SpanID() != agent.SpanContext().SpanID() {
		t.Errorf("mesh_execute's call is not a child of the agent span")
	}
	if telemetrytest.Attr(agent, telemetry.AttrCostUSD).AsFloat64() != cost || telemetrytest.Attr(agent, telemetry.AttrActionType).AsString() != "task" ||
		telemetrytest.Attr(agent, "meshwork.agent.backend").AsString() != "claude" || telemetrytest.Attr(agent, telemetry.AttrNumTurns).AsInt64() != int64(md["num_turns"].(float64)) {
		t.Errorf("agent span attributes %v, metadata %v", agent.Attributes(), md)
	}
	// Tokens are on the span when mesh-exec reports them.
	for key, field := range map[attribute.Key]string{telemetry.AttrUsageInputTokens: "input_tokens", telemetry.AttrUsageOutputTokens: "output_tokens"} {
		if n, ok := md[field].(float64); ok && telemetrytest.Attr(agent, key).AsInt64() != int64(n) {
			t.Errorf("span %s = %v, metadata %s = %v", key, telemetrytest.Attr(agent, key), field, n)
		}
	}
	if d, _ := gateEvent(t, agent); d != "allow" {
		t.Errorf("agent action's gate decision %q", d)
	}

	body := scrape(t, b)
	for _, want := range []string{
		`meshwork_agent_runs_total{backend="claude",outcome="ok"} 1`,
		`meshwork_agent_runs_total{backend="claude",outcome="error"} 0`,
		`meshwork_agent_cost_usd_total{backend="claude"} ` + strconv.FormatFloat(cost, 'g', -1, 64),
		`meshwork_agent_turns_total{backend="claude"} ` + strconv.FormatFloat(md["num_turns"].(float64), 'g', -1, 64),
		`meshwork_agent_run_duration_seconds_count{backend="claude"} 1`,
		`meshwork_journeys_live{worker="claude_code_assistant_v1"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	checkBoundedLabels(t, body)
}

// callCtx calls a tool that has to succeed, with ctx (and its span).
func callCtx(ctx context.Context, t *testing.T, cs *mcp.ClientSession, tool string, args any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(ctx, toolParams(tool, args))
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %+v", tool, err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// scrape is a marketplace's /metrics page.
func scrape(t *testing.T, b *bundle) string {
	t.Helper()
	resp, err := http.Get(b.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	return string(body)
}

// labelValue finds a label's values in an exposition.
var labelValue = regexp.MustCompile(`(?m)^(meshwork_[a-z_]+)\{[^}]*?\b(worker|backend)="([^"]*)"`)

// checkBoundedLabels checks that the worker and backend labels of the
// marketplace's metrics hold only catalog ids and known backends.
func checkBoundedLabels(t *testing.T, body string) {
	t.Helper()
	allowed := map[string]bool{"other": true, "claude": true, "codex": true, "opencode": true, "gemini": true, "command": true}
	catalog, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range catalog.Entries() {
		allowed[e.Definition.ID] = true
	}
	for _, m := range labelValue.FindAllStringSubmatch(body, -1) {
		if !allowed[m[3]] {
			t.Errorf("%s has %s=%q, not a catalog id or known backend", m[1], m[2], m[3])
		}
	}
}
