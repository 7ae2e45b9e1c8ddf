package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/pkg/fakeclaudelog"
	"github.com/meshwork/meshwork/pkg/mcptest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// bins holds mesh-exec and the fake claude, built once per test binary.
var bins struct {
	once     sync.Once
	dir      string
	meshExec string
	claude   string
	err      error
}

func build(t testing.TB) {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "mesh-exec-test-")
		if bins.err != nil {
			return
		}
		bins.meshExec = filepath.Join(bins.dir, "mesh-exec")
		bins.claude = filepath.Join(bins.dir, "claude")
		for out, pkg := range map[string]string{
			bins.meshExec: "github.com/meshwork/meshwork/services/mesh-exec/cmd/mesh-exec",
			// Beside mesh-exec: the hook's fast path.
			filepath.Join(bins.dir, "mesh-exec-hook"): "github.com/meshwork/meshwork/services/mesh-exec/cmd/mesh-exec-hook",
			bins.claude: "github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeclaude",
		} {
			if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("building %s: %w\n%s", pkg, err, b)
				return
			}
		}
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
}

// env is one mesh-exec under test: its workspace root, home (where the fake
// keeps sessions) and the fake's invocation log.
type env struct {
	root, home, log string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	build(t)
	dir := t.TempDir()
	e := &env{root: filepath.Join(dir, "workspace"), home: filepath.Join(dir, "home"), log: filepath.Join(dir, "fakeclaude.log")}
	for _, d := range []string{e.root, e.home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// environ is mesh-exec's environment: the fake on PATH first, a test key,
// the log, and CLAUDECODE set so the test can see it is scrubbed.
func (e *env) environ(extra ...string) []string {
	return append([]string{
		"PATH=" + bins.dir + ":" + os.Getenv("PATH"),
		"HOME=" + e.home,
		"ANTHROPIC_API_KEY=test-key-not-real",
		fakeclaudelog.Env + "=" + e.log,
		"CLAUDECODE=1",
		"CLAUDE_CODE_ENTRYPOINT=cli",
		"MESH_EXEC_WORKSPACE_ROOT=" + e.root,
		"MESH_EXEC_GRACE=500ms",
	}, extra...)
}

// stdio starts `mesh-exec serve --transport stdio` and connects a client.
func (e *env) stdio(t testing.TB, opts *mcp.ClientOptions, args []string, extraEnv ...string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(bins.meshExec, append([]string{"serve", "--transport", "stdio"}, args...)...)
	cmd.Env = e.environ(extraEnv...)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, opts).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting over stdio: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, cmd
}

const httpToken = "mesh-exec-test-token-0123456789"

// http starts `mesh-exec serve --transport http` on a free port and connects
// a client with the bearer token; it returns the client, the server's base
// URL and its process.
func (e *env) http(t testing.TB, extraEnv ...string) (*mcp.ClientSession, string, *exec.Cmd) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cmd := exec.Command(bins.meshExec, "serve", "--transport", "http", "--addr", addr)
	cmd.Env = e.environ(append([]string{"MESH_EXEC_TOKEN=" + httpToken}, extraEnv...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	// Ready when it logs that it serves.
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving mesh_execute over HTTP") {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("mesh-exec did not start serving HTTP")
	}
	url := "http://" + addr
	return mcptest.Connect(t, url+"/mcp", httpToken, nil), url, cmd
}

// result is mesh_execute's outcome.
type result struct {
	isError    bool
	structured bool           // the result had structuredContent
	raw        map[string]any // the structuredContent
	text       string
	out        struct {
		SessionID string         `json:"session_id"`
		Output    string         `json:"output"`
		Metadata  map[string]any `json:"metadata"`
	}
}

func execute(t testing.TB, cs *mcp.ClientSession, args map[string]any) result {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "mesh_execute", Arguments: args})
	if err != nil {
		t.Fatalf("mesh_execute: protocol error: %v", err)
	}
	var r result
	r.isError = res.IsError
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			r.text += tc.Text
		}
	}
	if res.StructuredContent != nil {
		r.structured = true
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &r.out)
		_ = json.Unmarshal(raw, &r.raw)
	}
	return r
}

// invocations reads the fake claude's log: one entry per run.
func (e *env) invocations(t testing.TB) []fakeclaudelog.Invocation {
	t.Helper()
	calls, err := fakeclaudelog.Read(e.log)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}
