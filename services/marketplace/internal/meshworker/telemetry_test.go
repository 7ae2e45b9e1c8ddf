package meshworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

// A tool call continues the trace the marketplace sends in params._meta,
// and the tool's log line carries that trace's id. Not parallel: it sets
// the process's telemetry globals.
func TestToolCallsContinueTheCallersTrace(t *testing.T) {
	rec := telemetrytest.Record(t)

	var logs bytes.Buffer
	srv, err := meshworker.NewServer(meshworker.Config{Root: t.TempDir()}, telemetry.NewLogger(&logs, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	client.AddSendingMiddleware(telemetry.ClientMiddleware())
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	callCtx, root := telemetry.Tracer().Start(ctx, "marketplace action")
	if res, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "list", Arguments: map[string]any{"path": "."}}); err != nil || res.IsError {
		t.Fatalf("list: %v %+v", err, res)
	}
	root.End()
	_ = cs.Close()
	_ = ss.Wait()

	want := root.SpanContext().TraceID()
	var server sdktrace.ReadOnlySpan
	for _, s := range telemetrytest.Named(rec, "tools/call list") {
		if s.SpanKind().String() == "server" {
			server = s
		}
	}
	if server == nil || server.SpanContext().TraceID() != want {
		t.Fatalf("no server span tools/call list in the caller's trace %s", want)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == "tool call" {
			found = true
			if r["trace_id"] != want.String() || r["span_id"] != server.SpanContext().SpanID().String() {
				t.Errorf("tool call logged with trace %v span %v, want %s %s", r["trace_id"], r["span_id"], want, server.SpanContext().SpanID())
			}
		}
	}
	if !found {
		t.Errorf("no tool call log line in %s", logs.String())
	}
}
