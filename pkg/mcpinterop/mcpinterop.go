// Package mcpinterop checks a Meshwork MCP server with a third-party
// client, mark3labs/mcp-go, at the current protocol (2026-07-28, its
// default: server/discover, no session) and pinned to the previous one
// (2025-11-25, the initialize handshake), over HTTP or stdio: the tools are
// listed, a call succeeds, a long call's progress notifications arrive, and
// a tool error's code is read from its structured content. Each service's
// tests run it against the real server; it is test support, not used by
// any service.
package mcpinterop

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/meshwork/meshwork/pkg/meshapi"
)

// The protocol versions a Meshwork server serves.
const (
	Current  = "2026-07-28"
	Previous = "2025-11-25"
)

// Connect returns a started, unconnected client's transport.
type Connect func(t testing.TB) transport.Interface

// HTTP connects to a streamable HTTP endpoint with a bearer token.
func HTTP(url, token string) Connect {
	return func(t testing.TB) transport.Interface {
		t.Helper()
		tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
		if err != nil {
			t.Fatalf("mcp-go HTTP transport: %v", err)
		}
		return tr
	}
}

// Stdio starts command with env and args and talks to it over its stdin
// and stdout; its stderr goes to the test's log.
func Stdio(command string, env []string, args ...string) Connect {
	return func(t testing.TB) transport.Interface {
		t.Helper()
		return transport.NewStdioWithOptions(command, env, args, transport.WithCommandStderrWriter(testLog{t}))
	}
}

// testLog writes to a test's log.
type testLog struct{ t testing.TB }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Call is one tool call of the suite.
type Call struct {
	Tool string
	Args map[string]any
	// Check, if set, looks at a successful call's structured content.
	Check func(t testing.TB, structured map[string]any)
}

// Suite is what Run checks of a server.
type Suite struct {
	Connect Connect
	// Tools must all be listed.
	Tools []string
	// Setup, if set, runs first, with each protocol's client (spawning the
	// journey the other calls use, say).
	Setup []Call
	// OK must succeed.
	OK Call
	// Progress, if set, must succeed and send at least one progress
	// notification for the token the client passes.
	Progress *Call
	// Failing must fail with Code in its structured content.
	Failing Call
	Code    meshapi.Code
}

// Run checks s at both protocol versions, as subtests.
func Run(t *testing.T, s Suite) {
	t.Helper()
	for _, version := range []string{Current, Previous} {
		t.Run(version, func(t *testing.T) {
			runVersion(t, s, version)
		})
	}
}

func runVersion(t *testing.T, s Suite, version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var opts []client.ClientOption
	if version != Current {
		opts = append(opts, client.WithProtocolVersion(version))
	}
	c := client.NewClient(s.Connect(t), opts...)
	t.Cleanup(func() { _ = c.Close() })
	var mu sync.Mutex
	progress := map[string]int{}
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != "notifications/progress" {
			return
		}
		token, _ := n.Params.AdditionalFields["progressToken"].(string)
		mu.Lock()
		progress[token]++
		mu.Unlock()
	})
	if err := c.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ClientInfo = mcp.Implementation{Name: "mcpinterop", Version: "v0"}
	if version != Current {
		init.Params.ProtocolVersion = version
	}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatalf("initialize at %s: %v", version, err)
	}
	if got := c.ProtocolVersion(); got != version {
		t.Fatalf("negotiated protocol %q, want %q", got, version)
	}

	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range s.Tools {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list has %v, missing %s", names, want)
		}
	}

	for _, call := range s.Setup {
		mustSucceed(ctx, t, c, call, nil)
	}
	mustSucceed(ctx, t, c, s.OK, nil)

	if s.Progress != nil {
		token := "interop-" + version
		mustSucceed(ctx, t, c, *s.Progress, token)
		// Sent before the result, but a client may hand notifications to
		// its handler after it returns the result.
		n := 0
		for deadline := time.Now().Add(10 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n = progress[token]
			mu.Unlock()
		}
		if n == 0 {
			t.Errorf("%s sent no progress notification for token %q", s.Progress.Tool, token)
		}
	}

	res, err := c.CallTool(ctx, request(s.Failing, nil))
	if err != nil {
		t.Fatalf("%s: protocol error %v, want a tool error", s.Failing.Tool, err)
	}
	if !res.IsError {
		t.Fatalf("%s succeeded, want a %s error", s.Failing.Tool, s.Code)
	}
	var body struct {
		Error struct {
			Code    meshapi.Code `json:"code"`
			Message string       `json:"message"`
		} `json:"error"`
	}
	if err := decode(res.StructuredContent, &body); err != nil || body.Error.Code != s.Code || body.Error.Message == "" {
		t.Errorf("%s error: structured content %v (%v), want error.code %q and a message", s.Failing.Tool, res.StructuredContent, err, s.Code)
	}
}

func request(call Call, token mcp.ProgressToken) mcp.CallToolRequest {
	var req mcp.CallToolRequest
	req.Params.Name = call.Tool
	req.Params.Arguments = call.Args
	if token != nil {
		req.Params.Meta = &mcp.Meta{ProgressToken: token}
	}
	return req
}

func mustSucceed(ctx context.Context, t *testing.T, c *client.Client, call Call, token mcp.ProgressToken) {
	t.Helper()
	res, err := c.CallTool(ctx, request(call, token))
	if err != nil {
		t.Fatalf("%s: %v", call.Tool, err)
	}
	if res.IsError {
		t.Fatalf("%s failed: %v", call.Tool, res.Content)
	}
	if call.Check != nil {
		var out map[string]any
		if err := decode(res.StructuredContent, &out); err != nil {
			t.Fatalf("%s: structured content %v: %v", call.Tool, res.StructuredContent, err)
		}
		call.Check(t, out)
	}
}

func decode(v any, into any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}
