package mcptools_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/mcptools"
)

// A run started by a tool call continues the caller's trace, sent in
// params._meta, and run_pipeline and get_run show it as trace_id; a ping
// (params a typed nil on the server) is served. Not parallel: it sets the
// global tracer provider.
func TestToolCallTrace(t *testing.T) {
	rec := telemetrytest.Record(t)

	eb := enginetest.Start(t)
	tools, err := mcptools.New(mcptools.Config{Engine: eb.Engine, Caller: meshapi.FixedCaller("erin")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cs := telemetrytest.Connect(ctx, t, tools)
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("ping: %v", err)
	}

	callCtx, caller := telemetry.Tracer().Start(ctx, "agent")
	res, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "run_pipeline", Arguments: map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "x"}}})
	caller.End()
	if err != nil || res.IsError {
		t.Fatalf("run_pipeline: %v %+v", err, res)
	}
	var run api.Run
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &run); err != nil {
		t.Fatal(err)
	}
	want := caller.SpanContext().TraceID().String()
	if run.TraceID != want {
		t.Errorf("run_pipeline's trace_id %q, want the caller's trace %s", run.TraceID, want)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_run", Arguments: map[string]any{"run_id": run.ID}})
	if err != nil || res.IsError {
		t.Fatalf("get_run: %v %+v", err, res)
	}
	var got struct {
		TraceID string `json:"trace_id"`
	}
	data, _ = json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, &got); err != nil || got.TraceID != want {
		t.Errorf("get_run's trace_id %q (%v), want %s", got.TraceID, err, want)
	}
	var server sdktrace.ReadOnlySpan
	for _, s := range telemetrytest.Named(rec, "tools/call run_pipeline") {
		if s.SpanKind().String() == "server" {
			server = s
		}
	}
	if server == nil || server.SpanContext().TraceID().String() != want {
		t.Errorf("no server span of run_pipeline in the caller's trace: %v", server)
	}
}
