package telemetrytest

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/telemetry"
)

// Connect connects server to a client over an in-memory transport, the
// client sending the trace context as the services' clients do
// (telemetry.ClientMiddleware). Both sessions close when the test ends.
func Connect(ctx context.Context, t testing.TB, server *mcp.Server) (*mcp.ServerSession, *mcp.ClientSession) {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	client.AddSendingMiddleware(telemetry.ClientMiddleware())
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return ss, cs
}
