package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// Requests are server spans named after their chi route, in the caller's
// trace (traceparent header); the run a request starts continues that
// trace, which GET /v1/runs/{id} shows as trace_id. Probes make no span.
// Not parallel: it sets the global tracer provider.
func TestRequestSpans(t *testing.T) {
	rec := telemetrytest.Record(t)
	b := setup(t)

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, b.srv.URL+"/v1/runs", strings.NewReader(`{"pipeline":"echo","inputs":{"task":"x"}}`))
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("start: %d", resp.StatusCode)
	}
	run := b.settle(t, strings.TrimPrefix(resp.Header.Get("Location"), "/v1/runs/"))
	if run.Status != runstate.RunSucceeded || run.TraceID != traceID {
		t.Fatalf("GET /v1/runs/{id}: status %s, trace_id %q; want succeeded in the caller's trace %s", run.Status, run.TraceID, traceID)
	}
	var list struct{ Runs []api.Run }
	b.call(t, http.MethodGet, "/v1/runs", nil, http.StatusOK, &list)
	if len(list.Runs) != 1 || list.Runs[0].TraceID != traceID {
		t.Errorf("GET /v1/runs: %+v, want the run with its trace_id", list.Runs)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/nowhere"} {
		b.do(t, http.MethodGet, path, aliceToken, nil)
	}

	server := map[string]sdktrace.ReadOnlySpan{}
	nodes := 0
	for _, s := range rec.Ended() {
		switch {
		case s.SpanKind() == trace.SpanKindServer:
			server[s.Name()] = s
			if p := telemetrytest.Attrs(s.Attributes())["url.path"]; p == "/healthz" || p == "/readyz" || p == "/metrics" {
				t.Errorf("%s made a span, %q", p, s.Name())
			}
		case strings.HasPrefix(s.Name(), "invoke_agent "):
			nodes++
			if s.SpanContext().TraceID().String() != traceID {
				t.Errorf("node span %q in trace %s, want the request's %s", s.Name(), s.SpanContext().TraceID(), traceID)
			}
		}
	}
	start, ok := server["POST /v1/runs"]
	if !ok {
		t.Fatalf("no span POST /v1/runs; server spans: %v", keys(server))
	}
	if start.SpanContext().TraceID().String() != traceID || start.Parent().SpanID().String() != parentID {
		t.Errorf("POST /v1/runs span is in trace %s under %s, want %s under %s", start.SpanContext().TraceID(), start.Parent().SpanID(), traceID, parentID)
	}
	// The server's name, never the client's Host header.
	startAttrs := telemetrytest.Attrs(start.Attributes())
	if addr, port := startAttrs["server.address"], startAttrs["server.port"]; addr != "orchestrator" || port != "" {
		t.Errorf("POST /v1/runs has server.address %q, server.port %q; want orchestrator and no port (Config.ServerName unset)", addr, port)
	}
	for name, route := range map[string]string{"POST /v1/runs": "/v1/runs", "GET /v1/runs/{id}": "/v1/runs/{id}"} {
		s, ok := server[name]
		if !ok {
			t.Errorf("no span %q; server spans: %v", name, keys(server))
			continue
		}
		if got := telemetrytest.Attrs(s.Attributes())["http.route"]; got != route {
			t.Errorf("span %q: http.route %q, want %q", name, got, route)
		}
	}
	for name := range server {
		if strings.Contains(name, "nowhere") || strings.Contains(name, run.ID) {
			t.Errorf("span named after a path: %q", name)
		}
	}
	if nodes != 2 {
		t.Errorf("%d node spans, want 2 (echo's first and second)", nodes)
	}
}

func keys(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
