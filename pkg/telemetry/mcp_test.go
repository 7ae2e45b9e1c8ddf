package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// A tool call crosses a real MCP connection: the server's span and the
// handler's context continue the client's trace, through params._meta only.
func TestTraceContextCrossesMCPInMeta(t *testing.T) {
	rec := telemetrytest.Record(t)
	ctx := context.Background()

	server := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "v"}, nil)
	server.AddReceivingMiddleware(telemetry.ServerMiddleware())
	var handlerTrace trace.SpanContext
	var sawMeta map[string]any
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		handlerTrace = trace.SpanContextFromContext(ctx)
		sawMeta = req.Params.Meta
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}, IsError: true}, nil, nil
	})
	_, cs := telemetrytest.Connect(ctx, t, server)

	ctx, root := telemetry.Tracer().Start(ctx, "root")
	callerMeta := map[string]any{"mine": "kept"}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Meta: callerMeta}); err != nil {
		t.Fatal(err)
	}
	root.End()

	if sawMeta["mine"] != "kept" || sawMeta[telemetry.MetaTraceparent] == nil {
		t.Errorf("server saw _meta %v, want the caller's key and a traceparent", sawMeta)
	}
	if handlerTrace.TraceID() != root.SpanContext().TraceID() {
		t.Fatalf("handler trace %s, want the caller's %s", handlerTrace.TraceID(), root.SpanContext().TraceID())
	}
	var clientSpan, serverSpan sdktrace.ReadOnlySpan
	for _, s := range telemetrytest.Named(rec, "tools/call echo") {
		switch s.SpanKind() {
		case trace.SpanKindClient:
			clientSpan = s
		case trace.SpanKindServer:
			serverSpan = s
		}
	}
	if clientSpan == nil || serverSpan == nil {
		t.Fatalf("want a client and a server span named %q; got %v", "tools/call echo", telemetrytest.Names(rec.Ended()))
	}
	if serverSpan.Parent().SpanID() != clientSpan.SpanContext().SpanID() {
		t.Errorf("server span's parent %s, want the client span %s", serverSpan.Parent().SpanID(), clientSpan.SpanContext().SpanID())
	}
	if clientSpan.Parent().SpanID() != root.SpanContext().SpanID() {
		t.Errorf("client span's parent is not the caller's span")
	}
	if handlerTrace.SpanID() != serverSpan.SpanContext().SpanID() {
		t.Errorf("the handler does not run in the server span")
	}
	for _, s := range []sdktrace.ReadOnlySpan{clientSpan, serverSpan} {
		attrs := telemetrytest.Attrs(s.Attributes())
		if attrs["mcp.method.name"] != "tools/call" || attrs["gen_ai.tool.name"] != "echo" || attrs["error.type"] != "tool_error" {
			t.Errorf("%v span attributes %v", s.SpanKind(), attrs)
		}
	}
}

// Untrusted _meta: values of the wrong type or a malformed traceparent
// start a new trace; nothing panics.
func TestExtractMetaIgnoresBadValues(t *testing.T) {
	telemetrytest.Record(t)
	for _, meta := range []map[string]any{
		nil,
		{"traceparent": 42},
		{"traceparent": "00-zz-yy-01"},
		{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},
		{"traceparent": []any{"x"}, "tracestate": map[string]any{}},
	} {
		ctx := telemetry.ExtractMeta(context.Background(), meta)
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("%v gave a valid remote span context", meta)
		}
	}
}

func TestStoredTraceContextResumesTheTrace(t *testing.T) {
	telemetrytest.Record(t)
	ctx, span := telemetry.Tracer().Start(context.Background(), "run")
	tp, ts := telemetry.TraceContext(ctx)
	span.End()
	if tp == "" {
		t.Fatal("no traceparent")
	}
	later := telemetry.WithTraceContext(context.Background(), tp, ts)
	if got := trace.SpanContextFromContext(later).TraceID(); got != span.SpanContext().TraceID() {
		t.Errorf("trace %s, want %s", got, span.SpanContext().TraceID())
	}
	if trace.SpanContextFromContext(telemetry.WithTraceContext(context.Background(), "garbage", "")).IsValid() {
		t.Error("a bad traceparent gave a valid context")
	}
}

func TestLogsCarryTraceAndSpanIDs(t *testing.T) {
	telemetrytest.Record(t)
	var buf bytes.Buffer
	logger := telemetry.NewLogger(&buf, slog.LevelInfo).With("service", "x")
	ctx, span := telemetry.Tracer().Start(context.Background(), "op")
	logger.InfoContext(ctx, "inside")
	span.End()
	logger.InfoContext(context.Background(), "outside")

	dec := json.NewDecoder(&buf)
	var inside, outside map[string]any
	if err := dec.Decode(&inside); err != nil {
		t.Fatal(err)
	}
	if err := dec.Decode(&outside); err != nil {
		t.Fatal(err)
	}
	if inside["trace_id"] != span.SpanContext().TraceID().String() || inside["span_id"] != span.SpanContext().SpanID().String() || inside["service"] != "x" {
		t.Errorf("record inside the span: %v", inside)
	}
	if _, ok := outside["trace_id"]; ok {
		t.Errorf("record outside any span has a trace id: %v", outside)
	}
}

// A request with no params (a ping) passes both middlewares: its params are
// a typed nil pointer, on which reading _meta would panic and take the
// server down.
func TestRequestWithoutParamsDoesNotPanic(t *testing.T) {
	telemetrytest.Record(t)
	ctx := context.Background()
	server := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "v"}, nil)
	server.AddReceivingMiddleware(telemetry.ServerMiddleware())
	ss, cs := telemetrytest.Connect(ctx, t, server)
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := ss.Ping(ctx, nil); err != nil {
		t.Fatalf("ping from the server: %v", err)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 64, "short"},
		{"abcdef", 3, "abc"},
		{"héllo", 2, "h"}, // é is two bytes: not cut in half
		{"a\xffb", 64, "a\uFFFDb"},
		{"", 3, ""},
	} {
		if got := telemetry.Truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestServerName(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv6zero, Port: 8080}, "marketplace:8080"},
		{nil, "marketplace:0"},
	} {
		if got := telemetry.ServerName("marketplace", tc.addr); got != tc.want {
			t.Errorf("ServerName(%v) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
