package mcphttp_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/mcphttp"
)

type echoIn struct {
	Text string `json:"text"`
}

// The handler's own limit is the one that holds (the SDK bounds a body at
// 4 MiB unless told), and a call whose client goes away is cancelled
// rather than left to run on.
func TestHandlerLimitAndCancellation(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, struct{}, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text[:1]}}}, struct{}{}, nil
	})
	cancelled := make(chan struct{})
	mcp.AddTool(srv, &mcp.Tool{Name: "hang"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, struct{}, error) {
		select {
		case <-ctx.Done():
			close(cancelled)
		case <-time.After(30 * time.Second):
		}
		return &mcp.CallToolResult{}, struct{}{}, nil
	})
	hs := httptest.NewServer(mcphttp.Handler(srv, mcphttp.HandlerOptions{MaxRequestBytes: 8 << 20}))
	defer hs.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "v"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	// 6 MiB: over the SDK's own default, under this handler's 8 MiB.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": strings.Repeat("x", 6<<20)}})
	if err != nil || res.IsError {
		t.Fatalf("a 6 MiB call under an 8 MiB limit: %v %+v", err, res)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a call past its client's deadline returned no error")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Error("the handler of a call its client gave up on was not cancelled")
	}
}
