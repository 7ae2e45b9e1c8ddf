package meshworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The binary as the marketplace runs it: "meshworker serve" over real
// stdin and stdout, logs on stderr, exiting when stdin closes.
func TestBinaryOverStdio(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go") // go test puts GOROOT/bin first on PATH
	if err != nil {
		t.Skip("no go command to build the binary with")
	}
	bin := filepath.Join(t.TempDir(), "meshworker")
	build := exec.Command(goTool, "build", "-o", bin, "github.com/meshwork/meshwork/services/marketplace/cmd/meshworker")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	root := t.TempDir()
	writeFiles(t, root, map[string]string{".env": "API_KEY=hunter2"})
	cmd := exec.Command(bin, "serve", "--root", root, "--max-file-size", "3000000", "--denied-path", "**/.env", "--denied-path=.git/**")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	ctx := context.Background()
	// A long TerminateDuration: the server must leave on its own when stdin
	// closes, not because it was sent SIGTERM.
	transport := &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Minute}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	b := &bundle{root: root, cs: cs}

	if got := cs.InitializeResult().ServerInfo.Name; got != "meshworker" {
		t.Errorf("server name = %q", got)
	}
	var w writeResult
	b.ok(t, "write", map[string]any{"path": "dir/hello.txt", "content": "hello over stdio"}, &w)
	var r readResult
	b.ok(t, "read", map[string]any{"path": "dir/hello.txt"}, &r)
	if r.Content != "hello over stdio" {
		t.Errorf("read back %q", r.Content)
	}
	if got := readFile(t, filepath.Join(root, "dir", "hello.txt")); got != "hello over stdio" {
		t.Errorf("on disk: %q", got)
	}
	b.fails(t, "write", map[string]any{"path": "big", "content": strings.Repeat("x", 3000001)}, "limit of 3000000 bytes")
	// A file at the limit, escaped as JSON, is a message of 18 MB: over the
	// SDK's default line length, which the server raises to fit.
	b.ok(t, "write", map[string]any{"path": "max", "content": strings.Repeat("\x01", 3000000)}, &w)
	if w.Bytes != 3000000 {
		t.Errorf("wrote %d bytes", w.Bytes)
	}
	b.fails(t, "exec", map[string]any{"command": []string{"true"}}, "not allowed")
	b.fails(t, "read", map[string]any{"path": ".env"}, `this worker may not access path ".env"`)

	// Closing stdin ends the server; Close waits for the process.
	start := time.Now()
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("meshworker took %v to exit after stdin closed", took)
	}
	if !cmd.ProcessState.Exited() || cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("meshworker ended with %v", cmd.ProcessState)
	}
	// Every stderr line is a JSON log record: nothing else may be there,
	// and nothing of the protocol.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	calls := 0
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line is not JSON: %q", line)
			continue
		}
		if rec["msg"] == "tool call" {
			calls++
		}
	}
	if calls != 6 {
		t.Errorf("%d tool calls logged, want 6:\n%s", calls, stderr.String())
	}

	t.Run("an invalid glob is a startup error", func(t *testing.T) {
		for _, flag := range []string{"--denied-path=[", "--allowed-path=/abs/**"} {
			cmd := exec.Command(bin, "serve", "--root", t.TempDir(), flag)
			out, err := cmd.CombinedOutput()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
				t.Errorf("%s: exit %v (%v), want 1", flag, cmd.ProcessState, err)
			}
			if !strings.Contains(string(out), "invalid glob") {
				t.Errorf("%s: output %q", flag, out)
			}
		}
	})
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
