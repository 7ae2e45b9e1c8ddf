package telemetry_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
)

// BenchmarkToolCall measures what tracing adds to one MCP tool call over an
// in-memory connection: "plain" has no middleware, "traced" has the client
// and server middlewares with spans recorded (not exported), as a service
// with no collector runs. The ratio traced/plain is the cost of telemetry
// on the cheapest possible call; real calls do I/O that dwarfs it.
func BenchmarkToolCall(b *testing.B) {
	for _, traced := range []bool{false, true} {
		name := "plain"
		if traced {
			name = "traced"
		}
		b.Run(name, func(b *testing.B) {
			prev := otel.GetTracerProvider()
			// Spans go through a batcher to an exporter that drops them:
			// the work a service does per span, but the network.
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
			otel.SetTracerProvider(tp)
			otel.SetTextMapPropagator(propagation.TraceContext{})
			defer otel.SetTracerProvider(prev)

			ctx := context.Background()
			server := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "v"}, nil)
			if traced {
				server.AddReceivingMiddleware(telemetry.ServerMiddleware())
			}
			mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
			})
			ct, st := mcp.NewInMemoryTransports()
			ss, err := server.Connect(ctx, st, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer ss.Close()
			client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "v"}, nil)
			if traced {
				client.AddSendingMiddleware(telemetry.ClientMiddleware())
			}
			cs, err := client.Connect(ctx, ct, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer cs.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discard is a span exporter that drops everything.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
