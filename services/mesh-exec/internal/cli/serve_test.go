package cli

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/command"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/runner"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/server"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/session"
)

const testToken = "mesh-exec-test-token-0123456789"

// Over HTTP the session is stateful, and the SDK runs every call with the
// context of the request that opened it: a call from a client that sends no
// trace context is still parented by the span of its own HTTP request
// ("POST /mcp"), which names the server, not the client's Host header. Not
// parallel: it sets the process's tracer provider and propagator.
func TestHTTPCallIsParentedByItsOwnRequest(t *testing.T) {
	rec := telemetrytest.Record(t)

	root := t.TempDir()
	sessions, err := session.Open(filepath.Join(root, ".meshwork", "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	echo := command.New(command.Config{Argv: []string{"echo", "{task}"}})
	if err := echo.Err(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		WorkspaceRoot: root, Backends: map[string]backend.Backend{"command": echo}, DefaultBackend: "command",
		Sessions: sessions, Runner: runner.New(runner.Config{Grace: time.Second}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	hs := httptest.NewServer(httpHandler(srv.MCP(), testTokens(t), http.NotFoundHandler(), telemetry.ServerName("mesh-exec", &net.TCPAddr{Port: 8081})))
	t.Cleanup(hs.Close)

	cs := mcptest.Connect(t, hs.URL+"/mcp", testToken, nil)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "mesh_execute", Arguments: map[string]any{"repository": "repo", "task": "hello"}})
	if err != nil || res.IsError {
		t.Fatalf("mesh_execute: %v %+v", err, res)
	}

	var call sdktrace.ReadOnlySpan
	for _, s := range telemetrytest.Named(rec, "tools/call mesh_execute") {
		if s.SpanKind() == trace.SpanKindServer {
			call = s
		}
	}
	if call == nil {
		t.Fatal("no server span for the call")
	}
	// The HTTP span ends once the response is written, after the client
	// has its answer.
	var post sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(10 * time.Second); post == nil && time.Now().Before(deadline); {
		for _, s := range rec.Ended() {
			if s.SpanContext().SpanID() == call.Parent().SpanID() {
				post = s
			}
		}
		if post == nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if post == nil {
		t.Fatal("the call's parent span never ended")
	}
	if post.Name() != "POST /mcp" || post.SpanKind() != trace.SpanKindServer || post.SpanContext().TraceID() != call.SpanContext().TraceID() {
		t.Errorf("the call's parent is %q (%s), want the HTTP server span POST /mcp", post.Name(), post.SpanKind())
	}
	// Its own request, which encloses the call, not the one that opened
	// the session (initialize), which ended before.
	if post.StartTime().After(call.StartTime()) || post.EndTime().Before(call.EndTime()) {
		t.Errorf("the call's parent POST /mcp (%v to %v) does not enclose the call (%v to %v)",
			post.StartTime(), post.EndTime(), call.StartTime(), call.EndTime())
	}
	var agent bool
	for _, s := range rec.Ended() {
		agent = agent || (s.Name() == "invoke_agent command" && s.Parent().SpanID() == call.SpanContext().SpanID())
	}
	if !agent {
		t.Error("no invoke_agent span under the call")
	}
	attrs := map[string]any{}
	for _, kv := range post.Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInterface()
	}
	if attrs["server.address"] != "mesh-exec" || attrs["server.port"] != int64(8081) {
		t.Errorf("POST /mcp has server.address %v, server.port %v; want mesh-exec, 8081", attrs["server.address"], attrs["server.port"])
	}
}

func testTokens(t *testing.T) *bearer.Set {
	t.Helper()
	tokens, err := bearer.New(map[string]string{"client": testToken})
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}
