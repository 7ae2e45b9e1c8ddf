package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/claude"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/runner"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/server"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/session"
)

// inProcess is a mesh-exec server in the test's process, so that its spans
// reach the test's recorder, with the fake claude as its only backend,
// connected over a real MCP (in-memory) connection to a client that sends
// its trace context in _meta.
type inProcess struct {
	cs      *mcp.ClientSession
	metrics *prometheus.Registry
	logs    *telemetrytest.SyncBuffer
}

func (e *env) inProcess(t *testing.T, extraEnv ...string) *inProcess {
	t.Helper()
	sessions, err := session.Open(filepath.Join(t.TempDir(), "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	p := &inProcess{metrics: prometheus.NewRegistry(), logs: &telemetrytest.SyncBuffer{}}
	srv, err := server.New(server.Config{
		WorkspaceRoot:  e.root,
		Backends:       map[string]backend.Backend{"claude": claude.New(claude.Config{Binary: bins.claude})},
		DefaultBackend: "claude",
		Sessions:       sessions,
		Runner:         runner.New(runner.Config{Env: e.environ(extraEnv...), Grace: 500 * time.Millisecond}),
		Settings:       backend.Settings{Model: "claude-test-model"},
		Logger:         telemetry.NewLogger(p.logs, slog.LevelInfo),
		Metrics:        p.metrics,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	client.AddSendingMiddleware(telemetry.ClientMiddleware())
	if p.cs, err = client.Connect(context.Background(), ct, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cs.Close() })
	return p
}

// call runs mesh_execute inside the caller's own span and returns the result
// and that span's context.
func (p *inProcess) call(t *testing.T, args map[string]any) (result, trace.SpanContext) {
	t.Helper()
	ctx, caller := telemetry.Tracer().Start(context.Background(), "caller")
	res, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: "mesh_execute", Arguments: args})
	caller.End()
	if err != nil {
		t.Fatalf("mesh_execute: protocol error: %v", err)
	}
	var r result
	r.isError = res.IsError
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &r.out)
	return r, caller.SpanContext()
}

// The mesh_execute of a run with tool uses continues the caller's trace: the
// server's MCP span, under it "invoke_agent claude" with the usage the fake
// reported, and under that one "execute_tool {tool}" per tool call, the
// failed one marked; the metadata has the token counts, the metrics count
// the run, and the logs carry the trace id.
func TestRunTraceMetricsAndMetadata(t *testing.T) {
	rec := telemetrytest.Record(t) // global: not parallel
	e := newEnv(t)
	p := e.inProcess(t, script(t, map[string]any{
		"steps": []any{
			map[string]any{"write": map[string]any{"file_path": "notes/a.md", "content": "hi\n"}},
			map[string]any{"edit": map[string]any{"file_path": "notes/a.md", "old_string": "hi", "new_string": "ho"}},
			map[string]any{"edit": map[string]any{"file_path": "missing.go", "old_string": "a", "new_string": "b"}},
		},
		"reply": "done", "cost_usd": 0.25, "input_tokens": 1234, "output_tokens": 567,
	}))

	r, caller := p.call(t, map[string]any{"repository": "repo", "task": "write notes"})
	if r.isError || r.out.Output != "done" {
		t.Fatalf("run: %+v", r)
	}
	md := r.out.Metadata
	if md["input_tokens"] != 1234.0 || md["output_tokens"] != 567.0 || md["cost_usd"] != 0.25 || md["num_turns"] != 4.0 {
		t.Errorf("metadata %v: want input_tokens 1234, output_tokens 567, cost_usd 0.25, num_turns 4", md)
	}

	spans := rec.Ended()
	client := findSpan(t, spans, "tools/call mesh_execute", trace.SpanKindClient)
	srv := findSpan(t, spans, "tools/call mesh_execute", trace.SpanKindServer)
	agent := findSpan(t, spans, "invoke_agent claude", trace.SpanKindInternal)
	if client.Parent().SpanID() != caller.SpanID() || srv.Parent().SpanID() != client.SpanContext().SpanID() {
		t.Errorf("the MCP spans do not continue the caller's span")
	}
	if agent.SpanContext().TraceID() != caller.TraceID() || agent.Parent().SpanID() != srv.SpanContext().SpanID() {
		t.Errorf("invoke_agent is not a child of the MCP server span in the caller's trace")
	}
	for k, want := range map[attribute.Key]any{
		telemetry.AttrProviderName:      "anthropic",
		telemetry.AttrRequestModel:      "claude-test-model",
		telemetry.AttrConversationID:    r.out.SessionID,
		telemetry.AttrUsageInputTokens:  int64(1234),
		telemetry.AttrUsageOutputTokens: int64(567),
		telemetry.AttrCostUSD:           0.25,
		telemetry.AttrNumTurns:          int64(4),
	} {
		if got := telemetrytest.Attr(agent, k).AsInterface(); got != want {
			t.Errorf("invoke_agent %s = %v, want %v", k, got, want)
		}
	}
	if agent.Status().Code == codes.Error {
		t.Errorf("a successful run's span has status %v", agent.Status())
	}

	var tools []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), "execute_tool ") {
			tools = append(tools, s)
		}
	}
	if len(tools) != 3 {
		t.Fatalf("%d execute_tool spans, want one per tool use (3): %v", len(tools), telemetrytest.Names(spans))
	}
	ids := map[string]bool{}
	for i, name := range []string{"execute_tool Write", "execute_tool Edit", "execute_tool Edit"} {
		s := tools[i] // ended in call order: each result came before the next call
		id := telemetrytest.Attr(s, telemetry.AttrToolCallID).AsString()
		if s.Name() != name || s.Parent().SpanID() != agent.SpanContext().SpanID() || !strings.HasPrefix(id, "toolu_") || ids[id] {
			t.Errorf("tool span %d: %s, parent %s, call id %q; want %s under invoke_agent with its own call id", i, s.Name(), s.Parent().SpanID(), id, name)
		}
		ids[id] = true
		if failed := s.Status().Code == codes.Error; failed != (i == 2) || (failed && telemetrytest.Attr(s, telemetry.AttrErrorType).AsString() != "tool_error") {
			t.Errorf("tool span %d: status %v, error.type %q; only the edit of a missing file failed", i, s.Status(), telemetrytest.Attr(s, telemetry.AttrErrorType).AsString())
		}
		if s.EndTime().After(agent.EndTime()) {
			t.Errorf("tool span %d ended after the run", i)
		}
	}

	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"meshwork_agent_runs_total", map[string]string{"backend": "claude", "outcome": "ok"}, 1},
		{"meshwork_agent_runs_total", map[string]string{"backend": "claude", "outcome": "error"}, 0},
		{"meshwork_agent_cost_usd_total", map[string]string{"backend": "claude"}, 0.25},
		{"meshwork_agent_tokens_total", map[string]string{"backend": "claude", "type": "input"}, 1234},
		{"meshwork_agent_tokens_total", map[string]string{"backend": "claude", "type": "output"}, 567},
		{"meshwork_agent_turns_total", map[string]string{"backend": "claude"}, 4},
		{"meshwork_agent_tool_uses_total", map[string]string{"backend": "claude"}, 3},
		{"meshwork_agent_run_duration_seconds", map[string]string{"backend": "claude"}, 1}, // observations
		{"meshwork_agent_runs_active", map[string]string{"backend": "claude"}, 0},
	} {
		if got := telemetrytest.MetricValue(t, p.metrics, m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}

	var finished map[string]any
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(line, "agent run finished") {
			_ = json.Unmarshal([]byte(line), &finished)
		}
	}
	if finished["trace_id"] != caller.TraceID().String() {
		t.Errorf("the run's log record %v does not carry the caller's trace id %s", finished, caller.TraceID())
	}
}

// A run that fails fails its span with a short error.type and counts as an
// error; tool calls still open end with it; a tool name from agent output
// is cut in the span name, however long.
func TestFailedRunTrace(t *testing.T) {
	longName := strings.Repeat("é", 5000) // two bytes each: the cut must not split one
	openToolUse := map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []any{
		map[string]any{"type": "tool_use", "id": "toolu_never_answered", "name": longName, "input": map[string]any{}},
	}}}
	for _, tc := range []struct {
		name, errorType string
		step            map[string]any
		timeout         int
	}{
		{name: "is_error", errorType: "agent_error", step: map[string]any{"fail": "API Error: overloaded"}},
		{name: "timeout", errorType: "timeout", step: map[string]any{"sleep_ms": 30000}, timeout: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := telemetrytest.Record(t)
			e := newEnv(t)
			p := e.inProcess(t, script(t, map[string]any{"steps": []any{map[string]any{"event": openToolUse}, tc.step}}))
			args := map[string]any{"repository": "repo", "task": "fail"}
			if tc.timeout > 0 {
				args["timeout"] = tc.timeout
			}
			r, _ := p.call(t, args)
			if !r.isError {
				t.Fatalf("run did not fail: %+v", r)
			}
			spans := rec.Ended()
			agent := findSpan(t, spans, "invoke_agent claude", trace.SpanKindInternal)
			if agent.Status().Code != codes.Error || telemetrytest.Attr(agent, telemetry.AttrErrorType).AsString() != tc.errorType {
				t.Errorf("invoke_agent status %v, error.type %q; want an error, %s", agent.Status(), telemetrytest.Attr(agent, telemetry.AttrErrorType).AsString(), tc.errorType)
			}
			if telemetrytest.Attr(agent, telemetry.AttrConversationID).AsString() != r.out.SessionID || r.out.SessionID == "" {
				t.Errorf("conversation id %q, want the session %q", telemetrytest.Attr(agent, telemetry.AttrConversationID).AsString(), r.out.SessionID)
			}
			wantName := "execute_tool " + strings.Repeat("é", 32) // 64 bytes
			tool := findSpan(t, spans, wantName, trace.SpanKindInternal)
			if tool.Parent().SpanID() != agent.SpanContext().SpanID() || tool.Status().Code != codes.Error ||
				telemetrytest.Attr(tool, telemetry.AttrErrorType).AsString() != tc.errorType || telemetrytest.Attr(tool, telemetry.AttrToolCallID).AsString() != "toolu_never_answered" {
				t.Errorf("the unanswered tool call's span: parent %s, status %v, attributes %v", tool.Parent().SpanID(), tool.Status(), tool.Attributes())
			}
			if got := telemetrytest.MetricValue(t, p.metrics, "meshwork_agent_runs_total", map[string]string{"backend": "claude", "outcome": "error"}); got != 1 {
				t.Errorf("runs_total{outcome=error} = %v, want 1", got)
			}
			if got := telemetrytest.MetricValue(t, p.metrics, "meshwork_agent_runs_active", map[string]string{"backend": "claude"}); got != 0 {
				t.Errorf("runs_active = %v after the run, want 0", got)
			}
		})
	}
}

// Over HTTP, mesh-exec serves /metrics with the run's counts without a
// token, answers the healthcheck subcommand, and exports over OTLP the
// run's spans and metrics, without the probes' and scrapes' requests.
func TestHTTPMetricsHealthcheckAndExport(t *testing.T) {
	t.Parallel()
	collector := telemetrytest.NewCollector(t)

	e := newEnv(t)
	cs, url, cmd := e.http(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, script(t, map[string]any{
		"steps":    []any{map[string]any{"write": map[string]any{"file_path": "a.txt", "content": "a\n"}}},
		"reply":    "written",
		"cost_usd": 0.5, "input_tokens": 100, "output_tokens": 20,
	}))
	if r := execute(t, cs, map[string]any{"repository": "repo", "task": "write"}); r.isError {
		t.Fatalf("run: %+v", r)
	}

	metrics := get(t, url+"/metrics", http.StatusOK)
	for _, line := range []string{
		`meshwork_agent_runs_total{backend="claude",outcome="ok"} 1`,
		`meshwork_agent_cost_usd_total{backend="claude"} 0.5`,
		`meshwork_agent_tokens_total{backend="claude",type="input"} 100`,
		`meshwork_agent_tokens_total{backend="claude",type="output"} 20`,
		`meshwork_agent_turns_total{backend="claude"} 2`,
		`meshwork_agent_tool_uses_total{backend="claude"} 1`,
		`meshwork_agent_run_duration_seconds_count{backend="claude"} 1`,
		`meshwork_agent_runs_active{backend="claude"} 0`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !strings.Contains(metrics, "\n"+line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	get(t, url+"/mcp", http.StatusUnauthorized) // /metrics is open, /mcp is not

	if out, err := exec.Command(bins.meshExec, "healthcheck", url+"/healthz").CombinedOutput(); err != nil {
		t.Errorf("healthcheck of the running server: %v\n%s", err, out)
	}
	if out, err := exec.Command(bins.meshExec, "healthcheck", "--timeout", "2s", url+"/nothing-here").CombinedOutput(); err == nil || !strings.Contains(string(out), "404") {
		t.Errorf("healthcheck of a 404 succeeded or said nothing of it: %v\n%s", err, out)
	}

	// Stopping flushes the telemetry.
	_ = cs.Close()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mesh-exec exited with %v", err)
	}
	traces, otlpMetrics := collector.Raw("/v1/traces"), collector.Raw("/v1/metrics")
	for _, want := range []string{"meshwork-mesh-exec", "POST /mcp", "tools/call mesh_execute", "invoke_agent claude", "execute_tool Write"} {
		if !strings.Contains(traces, want) {
			t.Errorf("exported traces lack %q", want)
		}
	}
	for _, probe := range []string{"/healthz", "/metrics"} {
		if strings.Contains(traces, probe) {
			t.Errorf("exported traces hold a request to %s", probe)
		}
	}
	if !strings.Contains(otlpMetrics, "meshwork_agent_runs_total") {
		t.Errorf("exported metrics lack meshwork_agent_runs_total (%d bytes)", len(otlpMetrics))
	}
}

func get(t *testing.T, url string, wantStatus int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true // no idle connection left for goleak to find
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != wantStatus {
		t.Errorf("GET %s: %s, want %d", url, resp.Status, wantStatus)
	}
	return string(b)
}

func findSpan(t *testing.T, spans []sdktrace.ReadOnlySpan, name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range spans {
		if s.Name() == name && s.SpanKind() == kind {
			return s
		}
	}
	t.Fatalf("no %v span %q among %v", kind, name, telemetrytest.Names(spans))
	return nil
}
