//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"golang.org/x/oauth2"

	"github.com/meshwork/meshwork/deploy/grafana"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// The services' names in traces (OTEL_SERVICE_NAME in compose.yaml).
const (
	svcOrchestrator = "meshwork-orchestrator"
	svcMarketplace  = "meshwork-marketplace"
	svcMeshExec     = "meshwork-mesh-exec"
)

// TestStack brings the compose stack up from the offline images and uses
// it as a user would. The subtests share the stack and run in order.
func TestStack(t *testing.T) {
	// The test's own MCP client starts traces too, so that the
	// marketplace's spans of its calls can be found by trace id.
	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.TraceContext{})

	s := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	var clientTrace string
	t.Run("mcp client spawns a worker, runs allowed and refused actions, stops it", func(t *testing.T) {
		clientTrace = s.workerJourney(ctx, t)
	})
	var firstRun runView
	t.Run("research pipeline through meshctl", func(t *testing.T) {
		firstRun = s.researchPipeline(ctx, t)
	})
	t.Run("coding pipeline: a local repository in, a patch that git applies out", func(t *testing.T) {
		s.codingPipeline(ctx, t)
	})
	t.Run("an agent spawns and uses a nested worker over the network", func(t *testing.T) {
		s.nestedWorkers(ctx, t)
	})
	t.Run("a journey keeps working through the second marketplace when the first is killed", func(t *testing.T) {
		s.replicas(ctx, t)
	})
	t.Run("orchestrator killed mid-run, run completes after restart", func(t *testing.T) {
		s.killedMidRun(ctx, t)
	})
	t.Run("one trace per run across every service", func(t *testing.T) {
		if firstRun.TraceID == "" {
			t.Fatal("the research run has no trace id (earlier subtest failed?)")
		}
		s.checkRunTrace(ctx, t, firstRun)
		s.checkClientTrace(ctx, t, clientTrace)
	})
	t.Run("metrics arrive over OTLP", func(t *testing.T) {
		s.checkMetrics(ctx, t)
	})
	t.Run("docker compose down -v leaves nothing behind", func(t *testing.T) {
		s.stopOrchestratorJourneys(ctx, t)
		s.downLeavesNothing(ctx, t)
	})
}

// connect opens an MCP session with the marketplace over streamable HTTP
// as caller (a token's owner), with trace context in _meta.
func (s *stack) connect(ctx context.Context, t *testing.T, caller string) *mcp.ClientSession {
	t.Helper()
	return s.connectTo(ctx, t, s.markURL, caller)
}

// connectTo is connect to the marketplace at base, one of the replicas.
func (s *stack) connectTo(ctx context.Context, t *testing.T, base, caller string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "meshwork-e2e", Version: "test"}, nil)
	client.AddSendingMiddleware(telemetry.ClientMiddleware())
	transport := &mcp.StreamableClientTransport{
		Endpoint:   base + "/mcp",
		HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: s.tokens[caller]}), Base: http.DefaultTransport}, Timeout: 2 * time.Minute},
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connecting to the marketplace as %s: %v", caller, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool and decodes its structured result into a map.
func call(ctx context.Context, t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (map[string]any, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	out := map[string]any{}
	switch {
	case res.StructuredContent != nil:
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out)
	case len(res.Content) > 0:
		if tc, ok := res.Content[0].(*mcp.TextContent); ok {
			if json.Unmarshal([]byte(tc.Text), &out) != nil {
				out["text"] = tc.Text
			}
		}
	}
	return out, res.IsError
}

func (s *stack) workerJourney(ctx context.Context, t *testing.T) string {
	t.Helper()
	// No token, no MCP.
	resp, err := http.Post(s.markURL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)) //nolint:noctx
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/mcp without a token: %s, want 401", resp.Status)
	}

	cs := s.connect(ctx, t, "client")
	ctx, span := telemetry.Tracer().Start(ctx, "e2e worker journey")
	defer span.End()
	journey := uuid.NewString()

	spawned, isErr := call(ctx, t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": journey})
	if isErr || spawned["container_id"] == nil || spawned["container_id"] == "" {
		t.Fatalf("spawn_worker: %v", spawned)
	}
	container := fmt.Sprint(spawned["container_id"])
	if ids := dockerLines(ctx, "ps", "-q", "--no-trunc", "--filter", "id="+container); len(ids) != 1 {
		t.Fatalf("the journey's container %s is not running", container)
	}

	wrote, isErr := call(ctx, t, cs, "execute_in_worker", map[string]any{
		"journey_id": journey,
		"action":     map[string]any{"type": "write", "target": "notes/hello.md", "content": "hello from e2e\n"},
	})
	if isErr || wrote["executed"] != true {
		t.Fatalf("allowed write: %v", wrote)
	}
	read, isErr := call(ctx, t, cs, "execute_in_worker", map[string]any{
		"journey_id": journey,
		"action":     map[string]any{"type": "read", "target": "notes/hello.md"},
	})
	if isErr || !strings.Contains(fmt.Sprint(read["output"]), "hello from e2e") {
		t.Fatalf("read back: %v", read)
	}
	refused, isErr := call(ctx, t, cs, "execute_in_worker", map[string]any{
		"journey_id": journey,
		"action":     map[string]any{"type": "write", "target": "config/.env", "content": "SECRET=1\n"},
	})
	if !isErr || refused["executed"] != false || !strings.Contains(fmt.Sprint(refused["violations"]), "denied_paths") {
		t.Fatalf("write to .env: want a refusal with the denied_paths violation, got %v", refused)
	}
	// Refused means not run: the file is not there.
	listed, _ := call(ctx, t, cs, "execute_in_worker", map[string]any{
		"journey_id": journey,
		"action":     map[string]any{"type": "list", "target": "."},
	})
	if strings.Contains(fmt.Sprint(listed["output"]), ".env") {
		t.Errorf("the refused write happened: %v", listed)
	}

	// The console shows the journey to its caller, audit log included: the
	// orchestrator asks the marketplace on the signed-in caller's behalf.
	if page := s.consolePage(ctx, t, "client", "/journeys/"+journey); !strings.Contains(page, "denied_paths") || !strings.Contains(page, "notes/hello.md") {
		t.Errorf("the console's page of the journey lacks its audit log:\n%.3000s", page)
	}

	stopped, isErr := call(ctx, t, cs, "stop_worker", map[string]any{"journey_id": journey, "workspace": "delete"})
	if isErr {
		t.Fatalf("stop_worker: %v", stopped)
	}
	if ids := dockerLines(ctx, "ps", "-aq", "--filter", "id="+container); len(ids) != 0 {
		t.Errorf("journey %s's container is still there after stop_worker: %v", journey, ids)
	}
	return span.SpanContext().TraceID().String()
}

// consolePage signs in to the orchestrator's console as caller and
// returns the page at path.
func (s *stack) consolePage(ctx context.Context, t *testing.T, caller, path string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	form := url.Values{"token": {s.tokens[caller]}, "next": {path}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.orchURL+"/signin", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req) // follows the redirect to path
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the console's %s: %s\n%.2000s", path, resp.Status, body)
	}
	return string(body)
}

// runView is what the test reads of meshctl's run JSON.
type runView struct {
	ID       string            `json:"id"`
	Status   string            `json:"status"`
	Error    string            `json:"error"`
	TraceID  string            `json:"trace_id"`
	Outputs  map[string]string `json:"outputs"`
	Sessions map[string]string `json:"sessions"`
	Nodes    []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"nodes"`
	Attempts []struct {
		NodeID    string `json:"node_id"`
		Iteration int    `json:"iteration"`
		Status    string `json:"status"`
		SessionID string `json:"session_id"`
	} `json:"attempts"`
}

func (v runView) node(id string) string {
	for _, n := range v.Nodes {
		if n.ID == id {
			return n.Status
		}
	}
	return ""
}

const task = "Compare B-trees and LSM trees for a write-heavy key-value store"

// startRun starts research_pipeline with meshctl and returns the run id.
func (s *stack) startRun(ctx context.Context, t *testing.T) string {
	t.Helper()
	var run struct {
		ID string `json:"id"`
	}
	s.meshctlJSON(ctx, t, &run, "run", "research_pipeline", "--input", "task="+task, "--input", "audience=database engineers")
	if run.ID == "" {
		t.Fatal("meshctl run printed no run id")
	}
	return run.ID
}

// waitRun polls the run until done says so.
func (s *stack) waitRun(ctx context.Context, t *testing.T, id string, timeout time.Duration, what string, done func(runView) bool) runView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var v runView
	for time.Now().Before(deadline) {
		s.meshctlJSON(ctx, t, &v, "runs", "show", id)
		if done(v) {
			return v
		}
		if v.Status == "failed" || v.Status == "cancelled" {
			t.Fatalf("run %s %s (%s) while waiting until %s", id, v.Status, v.Error, what)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("run %s: not %s after %s; last: status %s, nodes %+v", id, what, timeout, v.Status, v.Nodes)
	return v
}

func (s *stack) researchPipeline(ctx context.Context, t *testing.T) runView {
	t.Helper()
	id := s.startRun(ctx, t)
	// --watch follows the run to its approval: exit code 2.
	watched, code := s.meshctlRun(ctx, t, "runs", "watch", id)
	if code != 2 {
		t.Fatalf("meshctl runs watch: exit %d, want 2 (waiting for approval):\n%s", code, watched)
	}
	v := s.waitRun(ctx, t, id, time.Minute, "waiting", func(v runView) bool { return v.Status == "waiting" })
	for _, n := range []string{"research", "write", "review"} {
		if v.Outputs[n] == "" {
			t.Errorf("node %s has no output: %v", n, v.Outputs)
		}
	}
	// Outputs flow through the templates: the writer's task held the
	// research output, which held the task (the fake replies "ok: <task>").
	if !strings.Contains(v.Outputs["write"], task) {
		t.Errorf("the writer's output does not carry the research: %q", v.Outputs["write"])
	}
	for _, role := range []string{"researcher", "writer", "reviewer"} {
		if v.Sessions[role] == "" {
			t.Errorf("role %s has no session checkpointed: %v", role, v.Sessions)
		}
	}
	var history struct {
		Checkpoints []struct {
			Seq    int    `json:"seq"`
			NodeID string `json:"node_id"`
		} `json:"checkpoints"`
	}
	s.meshctlJSON(ctx, t, &history, "runs", "history", id)
	checkpoints := history.Checkpoints
	seen := map[string]bool{}
	for _, c := range checkpoints {
		seen[c.NodeID] = true
	}
	for _, n := range []string{"research", "write", "review"} {
		if !seen[n] {
			t.Errorf("no checkpoint for node %s in %+v", n, checkpoints)
		}
	}

	if out, code := s.meshctlRun(ctx, t, "runs", "approve", id, "--value", "approved"); code != 0 {
		t.Fatalf("meshctl runs approve: exit %d: %s", code, out)
	}
	v = s.waitRun(ctx, t, id, time.Minute, "succeeded", func(v runView) bool { return v.Status == "succeeded" })
	if v.Outputs["approve"] != "approved" {
		t.Errorf("approval output %q, want approved", v.Outputs["approve"])
	}
	t.Logf("run %s succeeded, trace %s", id, v.TraceID)
	return v
}

func (s *stack) killedMidRun(ctx context.Context, t *testing.T) {
	t.Helper()
	id := s.startRun(ctx, t)
	// Kill once the research is committed, while later nodes run (each
	// review takes the fake claude's 2.5 s).
	before := s.waitRun(ctx, t, id, 2*time.Minute, "past research", func(v runView) bool {
		return v.node("research") == "succeeded" && v.Status == "running"
	})
	// The researcher's span is exported before the kill (the services
	// export in batches, every 500 ms here): the run's trace must hold it
	// and what ran after the restart.
	s.waitSpans(ctx, t, before.TraceID, func(spans []telemetrytest.Span) bool {
		return hasSpan(spans, svcOrchestrator, "invoke_agent researcher")
	})
	s.run(ctx, t, "kill", "-s", "SIGKILL", "orchestrator")
	t.Logf("orchestrator killed with run %s at nodes %+v", id, before.Nodes)
	// A killed orchestrator answers nothing.
	if resp, err := http.Get(s.orchURL + "/healthz"); err == nil { //nolint:noctx
		_ = resp.Body.Close()
		t.Fatalf("the orchestrator still answers after SIGKILL: %s", resp.Status)
	}
	s.run(ctx, t, "up", "-d", "--no-deps", "orchestrator")
	s.waitHTTP(ctx, t, s.orchURL+"/healthz")

	v := s.waitRun(ctx, t, id, 3*time.Minute, "waiting for approval", func(v runView) bool { return v.Status == "waiting" })
	if out, code := s.meshctlRun(ctx, t, "runs", "approve", id, "--value", "approved"); code != 0 {
		t.Fatalf("approve after restart: exit %d: %s", code, out)
	}
	v = s.waitRun(ctx, t, id, time.Minute, "succeeded", func(v runView) bool { return v.Status == "succeeded" })
	// Exactly one succeeded attempt per node iteration: nothing ran twice
	// to completion, nothing was lost.
	succeeded := map[string]int{}
	for _, a := range v.Attempts {
		if a.Status == "succeeded" {
			succeeded[fmt.Sprintf("%s#%d", a.NodeID, a.Iteration)]++
		}
	}
	for key, n := range succeeded {
		if n != 1 {
			t.Errorf("node %s succeeded %d times", key, n)
		}
	}
	for _, n := range []string{"research", "write", "review", "approve"} {
		if v.Outputs[n] == "" {
			t.Errorf("after the restart, node %s has no output", n)
		}
	}
	// The run is still one trace: the reviewer, which ran after the
	// restart, reported into the run's trace.
	spans := s.waitSpans(ctx, t, v.TraceID, func(spans []telemetrytest.Span) bool { return hasSpan(spans, svcOrchestrator, "invoke_agent reviewer") })
	if !hasSpan(spans, svcOrchestrator, "invoke_agent researcher") {
		t.Errorf("the run's trace lacks the researcher's node span from before the crash: %v", spanNames(spans))
	}
}

// waitSpans polls the sink for a trace's spans until ok says they are all
// there (the services export in batches).
func (s *stack) waitSpans(ctx context.Context, t *testing.T, traceID string, ok func([]telemetrytest.Span) bool) []telemetrytest.Span {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	var spans []telemetrytest.Span
	for time.Now().Before(deadline) {
		spans = nil
		if err := getJSON(ctx, s.sinkURL+"/spans?trace_id="+traceID, &spans); err != nil {
			t.Fatal(err)
		}
		if ok(spans) {
			return spans
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("trace %s incomplete after 45s; spans: %v", traceID, spanNames(spans))
	return nil
}

func hasSpan(spans []telemetrytest.Span, service, name string) bool {
	return slices.ContainsFunc(spans, func(sp telemetrytest.Span) bool { return sp.Service == service && sp.Name == name })
}

// hasSpanWith reports whether service sent a span whose name starts with
// prefix and that has every attribute of attrs.
func hasSpanWith(spans []telemetrytest.Span, service, prefix string, attrs map[string]string) bool {
	return slices.ContainsFunc(spans, func(sp telemetrytest.Span) bool {
		if sp.Service != service || !strings.HasPrefix(sp.Name, prefix) {
			return false
		}
		for k, v := range attrs {
			if sp.Attributes[k] != v {
				return false
			}
		}
		return true
	})
}

func spanNames(spans []telemetrytest.Span) []string {
	var out []string
	for _, sp := range spans {
		out = append(out, sp.Service+": "+sp.Name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkRunTrace: the research run is one trace in which the orchestrator,
// the marketplace (its gate included) and mesh-exec all report, linked
// parent to child.
func (s *stack) checkRunTrace(ctx context.Context, t *testing.T, run runView) {
	t.Helper()
	want := []struct{ service, name string }{
		{svcOrchestrator, "invoke_agent researcher"},
		{svcOrchestrator, "invoke_agent writer"},
		{svcOrchestrator, "invoke_agent reviewer"},
		{svcOrchestrator, "tools/call mesh_execute"},
		{svcOrchestrator, "tools/call execute_in_worker"},
		{svcMeshExec, "tools/call mesh_execute"},
		{svcMeshExec, "invoke_agent claude"},
		{svcMarketplace, "tools/call execute_in_worker"},
	}
	spans := s.waitSpans(ctx, t, run.TraceID, func(spans []telemetrytest.Span) bool {
		for _, w := range want {
			if !hasSpan(spans, w.service, w.name) {
				return false
			}
		}
		return true
	})
	services := map[string]bool{}
	byID := map[string]telemetrytest.Span{}
	for _, sp := range spans {
		services[sp.Service] = true
		byID[sp.SpanID] = sp
		if sp.TraceID != run.TraceID {
			t.Fatalf("the sink answered a span of another trace: %+v", sp)
		}
	}
	for _, svc := range []string{svcOrchestrator, svcMarketplace, svcMeshExec} {
		if !services[svc] {
			t.Errorf("no span of %s in the run's trace", svc)
		}
	}
	// Linked: every span's parent is in the trace (meshctl sends no trace
	// context, so the root is the orchestrator's span of the request that
	// started the run).
	for _, sp := range spans {
		if sp.ParentID != "" && byID[sp.ParentID].SpanID == "" {
			t.Errorf("%s's span %q has a parent %s that is not in the trace", sp.Service, sp.Name, sp.ParentID)
		}
	}
	// mesh-exec's server span is a child of the orchestrator's client span:
	// the context crossed the MCP call in _meta.
	crossed := false
	for _, sp := range spans {
		if sp.Service == svcMeshExec && sp.Name == "tools/call mesh_execute" && byID[sp.ParentID].Service == svcOrchestrator {
			crossed = true
		}
	}
	if !crossed {
		t.Error("no mesh-exec server span is a child of an orchestrator span")
	}
	// The writer's action went through the marketplace's gate.
	gated := false
	for _, sp := range spans {
		for _, e := range sp.Events {
			if sp.Service == svcMarketplace && e.Name == telemetry.EventGateDecision && e.Attributes[string(telemetry.AttrGateDecision)] == "allow" {
				gated = true
			}
		}
	}
	if !gated {
		t.Errorf("no gate decision event in the marketplace's spans of the run: %v", spanNames(spans))
	}
	var tokens bool
	for _, sp := range spans {
		if sp.Name == "invoke_agent claude" && sp.Attributes[string(telemetry.AttrUsageInputTokens)] != "" {
			tokens = true
		}
	}
	if !tokens {
		t.Error("mesh-exec's invoke_agent spans carry no gen_ai.usage.input_tokens")
	}
	// What the dashboards' trace panels select on (deploy/grafana).
	if !hasSpanWith(spans, svcOrchestrator, "invoke_agent", map[string]string{string(telemetry.AttrPipeline): "research_pipeline"}) {
		t.Error("no orchestrator invoke_agent span carries meshwork.pipeline=research_pipeline (the runs dashboard's trace table)")
	}
	if !hasSpanWith(spans, svcMeshExec, "", map[string]string{string(telemetry.AttrOperationName): telemetry.OperationInvokeAgent}) {
		t.Error("no mesh-exec span carries gen_ai.operation.name=invoke_agent (the agents dashboard's trace table)")
	}
	t.Logf("run trace %s: %d spans from %d services", run.TraceID, len(spans), len(services))
}

// checkClientTrace: the external client's calls are in its own trace, with
// the refusal as a gate event carrying the violated constraint.
func (s *stack) checkClientTrace(ctx context.Context, t *testing.T, traceID string) {
	t.Helper()
	spans := s.waitSpans(ctx, t, traceID, func(spans []telemetrytest.Span) bool {
		for _, sp := range spans {
			for _, e := range sp.Events {
				if e.Name == telemetry.EventGateDecision && e.Attributes[string(telemetry.AttrGateDecision)] == "refuse" {
					return true
				}
			}
		}
		return false
	})
	for _, sp := range spans {
		for _, e := range sp.Events {
			if e.Name == telemetry.EventGateDecision && e.Attributes[string(telemetry.AttrGateDecision)] == "refuse" &&
				!strings.Contains(e.Attributes[string(telemetry.AttrGateViolations)], "denied_paths") {
				t.Errorf("the refusal event does not name denied_paths: %v", e.Attributes)
			}
		}
	}
	if !hasSpanWith(spans, svcMarketplace, "", map[string]string{string(telemetry.AttrGateDecision): "refuse", string(telemetry.AttrWorkerID): "filesystem_write_v1"}) {
		t.Error("no marketplace span carries meshwork.gate.decision=refuse and meshwork.worker.id (the workers dashboard's refusals table)")
	}
	if !hasSpan(spans, svcMarketplace, "tools/call spawn_worker") || !hasSpan(spans, svcMarketplace, "tools/call stop_worker") {
		t.Errorf("the client's trace lacks the marketplace's spawn/stop spans: %v", spanNames(spans))
	}
}

// checkMetrics: every metric of the dashboards' contract arrives over OTLP
// from each service that should send it.
func (s *stack) checkMetrics(ctx context.Context, t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var missing []string
	for time.Now().Before(deadline) {
		var got map[string][]string
		if err := getJSON(ctx, s.sinkURL+"/metrics-names", &got); err != nil {
			t.Fatal(err)
		}
		missing = nil
		for name, m := range grafana.Metrics {
			for _, svc := range m.Services {
				if !slices.Contains(got[name], svc) {
					missing = append(missing, svc+": "+name)
				}
			}
		}
		if len(missing) == 0 {
			return
		}
		time.Sleep(time.Second)
	}
	slices.Sort(missing)
	t.Errorf("metrics the dashboards use never arrived over OTLP:\n  %s", strings.Join(missing, "\n  "))
}

// stopOrchestratorJourneys stops the writer's journeys, which the
// orchestrator keeps for the thread's next run, as an operator would
// before taking the stack down: they are the marketplace's containers,
// not compose's.
func (s *stack) stopOrchestratorJourneys(ctx context.Context, t *testing.T) {
	t.Helper()
	cs := s.connect(ctx, t, "orchestrator")
	list, isErr := call(ctx, t, cs, "list_journeys", map[string]any{})
	if isErr {
		t.Fatalf("list_journeys: %v", list)
	}
	b, _ := json.Marshal(list["journeys"])
	var journeys []struct {
		JourneyID string `json:"journey_id"`
		State     string `json:"state"`
	}
	_ = json.Unmarshal(b, &journeys)
	if len(journeys) == 0 {
		t.Fatalf("the orchestrator has no journeys; the writer ran somewhere else? %v", list)
	}
	for _, j := range journeys {
		if j.State == "deleted" {
			continue
		}
		if out, isErr := call(ctx, t, cs, "stop_worker", map[string]any{"journey_id": j.JourneyID, "workspace": "delete"}); isErr {
			t.Errorf("stop_worker %s: %v", j.JourneyID, out)
		}
	}
	// What is left is the warm pool's member (a pool of one), which no
	// journey holds; `docker compose down` must remove it.
	workers := dockerLines(ctx, "ps", "-aq", "--filter", "label=meshwork.test="+s.project, "--filter", "label=meshwork.journey")
	pool := dockerLines(ctx, "ps", "-aq", "--filter", "label=meshwork.test="+s.project, "--filter", "label=meshwork.pool")
	if journeys := slices.DeleteFunc(workers, func(id string) bool { return slices.Contains(pool, id) }); len(journeys) > 0 || len(pool) > 1 {
		t.Errorf("containers spawned by the marketplace survive stop_worker: %v (and %d pool members, at most 1 expected)", journeys, len(pool))
	}
}

func (s *stack) downLeavesNothing(ctx context.Context, t *testing.T) {
	t.Helper()
	s.run(ctx, t, "down", "-v", "--remove-orphans", "-t", "5")
	label := "label=com.docker.compose.project=" + s.project
	for _, what := range [][]string{
		{"ps", "-aq", "--filter", label},
		{"volume", "ls", "-q", "--filter", label},
		{"network", "ls", "-q", "--filter", label},
		{"ps", "-aq", "--filter", "label=meshwork.test=" + s.project},
		{"volume", "ls", "-q", "--filter", "label=meshwork.test=" + s.project},
	} {
		if left := dockerLines(ctx, what...); len(left) > 0 {
			t.Errorf("docker %s: %v left behind", strings.Join(what, " "), left)
		}
	}
}

// waitPoolReady waits until the marketplace's /metrics counts a ready
// member of worker's warm pool.
func (s *stack) waitPoolReady(ctx context.Context, t *testing.T, worker string) {
	t.Helper()
	want := fmt.Sprintf(`meshwork_pool_members{state="ready",worker=%q} 1`, worker)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.markURL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if strings.Contains(string(body), want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the marketplace's warm pool of %s never had a ready member (/metrics lacks %s)", worker, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
