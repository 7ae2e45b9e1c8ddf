package meshworker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is a meshworker server on a temporary workspace and a real MCP
// client connected to it in process.
type bundle struct {
	root string
	cs   *mcp.ClientSession
}

// setup starts a server with cfg on a fresh workspace (cfg.Root, when
// empty) and connects a client over in-memory transports.
func setup(t testing.TB, cfg meshworker.Config) *bundle {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	srv, err := meshworker.NewServer(cfg, nil)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatalf("server Connect: %v", err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client Connect: %v", err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return &bundle{root: cfg.Root, cs: cs}
}

// call calls a tool over MCP; a protocol error fails the test, a tool error
// does not.
func (b *bundle) call(t testing.TB, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := b.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", tool, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured result
// into out, which also checks the wire names of the contract.
func (b *bundle) ok(t testing.TB, tool string, args, out any) {
	t.Helper()
	res := b.call(t, tool, args)
	if res.IsError {
		t.Fatalf("%s %v: unexpected tool error: %s", tool, args, text(res))
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: marshal structured content: %v", tool, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: decode %s: %v", tool, raw, err)
	}
}

// fails calls a tool that must fail with a message containing want.
func (b *bundle) fails(t testing.TB, tool string, args any, want string) string {
	t.Helper()
	res := b.call(t, tool, args)
	msg := text(res)
	if !res.IsError {
		t.Fatalf("%s %v: succeeded, want an error containing %q; result: %s", tool, args, want, msg)
	}
	if !strings.Contains(msg, want) {
		t.Fatalf("%s %v: error %q, want it to contain %q", tool, args, msg, want)
	}
	return msg
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// The results as the marketplace sees them on the wire.
type (
	readResult struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Size    int64  `json:"size"`
	}
	writeResult struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}
	listResult struct {
		Entries []struct {
			Path string `json:"path"`
			Type string `json:"type"`
			Size int64  `json:"size"`
		} `json:"entries"`
		Truncated bool `json:"truncated"`
	}
	searchResult struct {
		Matches []struct {
			Path string `json:"path"`
			Line int    `json:"line"`
			Text string `json:"text"`
		} `json:"matches"`
		Truncated    bool `json:"truncated"`
		FilesScanned int  `json:"files_scanned"`
		TimedOut     bool `json:"timed_out"`
		LinesSkipped int  `json:"lines_skipped"`
	}
	deleteResult struct {
		Path    string `json:"path"`
		Deleted bool   `json:"deleted"`
	}
	execResult struct {
		ExitCode  int    `json:"exit_code"`
		Stdout    string `json:"stdout"`
		Stderr    string `json:"stderr"`
		TimedOut  bool   `json:"timed_out"`
		Truncated bool   `json:"truncated"`
		// QuotaExceeded is the reason the workspace is over its quota.
		QuotaExceeded string `json:"quota_exceeded"`
	}
)

func (r listResult) paths() []string {
	var ps []string
	for _, e := range r.Entries {
		ps = append(ps, e.Path)
	}
	return ps
}

// writeFiles creates files (and their directories) under dir.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
