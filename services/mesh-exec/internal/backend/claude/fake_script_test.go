package claude

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/fakeclaudelog"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

func TestFakeScriptSteps(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	script := writeScript(t, map[string]any{
		"steps": []map[string]any{
			{"text": "Looking at the repository."},
			{"write": map[string]any{"file_path": "src/app.txt", "content": "one two two\n"}},
			{"edit": map[string]any{"file_path": "src/app.txt", "old_string": "one", "new_string": "ONE"}},
			{"edit": map[string]any{"file_path": "src/app.txt", "old_string": "two", "new_string": "2"}}, // two matches: refused
			{"edit": map[string]any{"file_path": "missing.txt", "old_string": "a", "new_string": "b"}},   // no such file
			{"unknown_event": true},
			{"event": map[string]any{"type": "system", "subtype": "status", "status": "requesting"}},
			{"stderr": "a warning on stderr"},
		},
		"reply":         "All done.",
		"cost_usd":      0.25,
		"input_tokens":  1000,
		"output_tokens": 200,
	})
	p := runBackend(t, backend.Request{Repository: repo, Task: "work"}, env(t.TempDir(), script))
	if p.Result.IsError || p.ExitCode != 0 {
		t.Fatalf("run failed: exit %d, %+v\nstderr %s", p.ExitCode, p.Result, p.Stderr)
	}
	file := filepath.Join(repo, "src", "app.txt")
	if b, _ := os.ReadFile(file); string(b) != "ONE two two\n" {
		t.Errorf("src/app.txt = %q, want %q", b, "ONE two two\n")
	}
	want := backend.Result{
		SessionID: p.Result.SessionID, Output: "All done.", CostUSD: 0.25, DurationMS: p.Result.DurationMS,
		NumTurns: 5, InputTokens: 1000, OutputTokens: 200,
		ToolsUsed:     []string{"Write", "Edit"},
		FilesModified: []string{file}, // the failed edits add nothing
	}
	if !reflect.DeepEqual(p.Result, want) {
		t.Errorf("result\n%+v\nwant\n%+v", p.Result, want)
	}
	wantKinds := []backend.Kind{
		backend.KindInit, backend.KindText,
		backend.KindToolUse, backend.KindToolResult, // write
		backend.KindToolUse, backend.KindToolResult, // edit
		backend.KindToolUse, backend.KindToolResult, // refused edit
		backend.KindToolUse, backend.KindToolResult, // missing file
		backend.KindText, backend.KindResult,
	}
	if got := backendtest.Kinds(p.Events); !slices.Equal(got, wantKinds) {
		t.Errorf("event kinds %v, want %v", got, wantKinds)
	}
	if e := p.Events[7]; !e.IsError || e.Tool != "Edit" || !strings.Contains(e.Text, "Found 2 matches") {
		t.Errorf("refused edit: %+v", e)
	}
	if !strings.Contains(p.Stderr, "a warning on stderr") {
		t.Errorf("stderr = %q", p.Stderr)
	}
}

func TestFakeScriptEndings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script any
		code   int
		output string
		err    bool
	}{
		{name: "default", script: nil, code: 0, output: "ok: the task"},
		{name: "last text is the reply", script: map[string]any{"steps": []any{map[string]any{"text": "said last"}}}, output: "said last"},
		{
			name: "fail", script: map[string]any{"steps": []any{map[string]any{"fail": "API Error: 529 overloaded"}, map[string]any{"text": "never"}}},
			code: 1, output: "API Error: 529 overloaded", err: true,
		},
		{
			name: "crash", script: map[string]any{"steps": []any{map[string]any{"crash": map[string]any{"exit_code": 3, "stderr": "TypeError: boom"}}}},
			code: 3, output: "TypeError: boom", err: true,
		},
		{name: "bad script", script: map[string]any{"stesp": []any{}}, code: 2, output: "unknown field", err: true},
		{name: "two actions in a step", script: map[string]any{"steps": []any{map[string]any{"text": "a", "fail": "b"}}}, code: 2, output: "2 actions", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var extra []string
			if tt.script != nil {
				extra = append(extra, writeScript(t, tt.script))
			}
			p := runBackend(t, backend.Request{Repository: t.TempDir(), Task: "the task"}, env(t.TempDir(), extra...))
			if p.ExitCode != tt.code || p.Result.IsError != tt.err || !strings.Contains(p.Result.Output, tt.output) {
				t.Errorf("exit %d, result %+v; want exit %d, IsError %v, output containing %q", p.ExitCode, p.Result, tt.code, tt.err, tt.output)
			}
		})
	}
}

// TestFakeScriptTurns: "turns" gives each turn of a session its script.
func TestFakeScriptTurns(t *testing.T) {
	t.Parallel()
	home, repo := t.TempDir(), t.TempDir()
	e := env(home, writeScript(t, map[string]any{"turns": []any{
		map[string]any{"reply": "turn one"},
		map[string]any{"reply": "turn two"},
	}}))
	first := runBackend(t, backend.Request{Repository: repo, Task: "a"}, e)
	id := first.Result.SessionID
	second := runBackend(t, backend.Request{Repository: repo, Task: "b", SessionID: id}, e)
	third := runBackend(t, backend.Request{Repository: repo, Task: "c", SessionID: id}, e)
	other := runBackend(t, backend.Request{Repository: repo, Task: "d"}, e)
	for _, c := range []struct {
		got  string
		want string
	}{{first.Result.Output, "turn one"}, {second.Result.Output, "turn two"}, {third.Result.Output, "turn two"}, {other.Result.Output, "turn one"}} {
		if c.got != c.want {
			t.Errorf("Output = %q, want %q", c.got, c.want)
		}
	}
}

// TestFakeInvocationLog: FAKE_CLAUDE_LOG records how the fake was run.
func TestFakeInvocationLog(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	log := filepath.Join(t.TempDir(), "invocations.jsonl")
	req := backend.Request{Repository: repo, Task: "log me", Settings: backend.Settings{Model: "sonnet"}}
	runBackend(t, req, env(t.TempDir(), fakeclaudelog.Env+"="+log))
	runBackend(t, req, env(t.TempDir(), fakeclaudelog.Env+"="+log, "CLAUDECODE=1"))

	// And once with a stdin that is an open pipe, not /dev/null.
	cmd := exec.Command(fakeClaude(t), "-p", "--", "hi")
	cmd.Dir, cmd.Env = repo, env(t.TempDir(), fakeclaudelog.Env+"="+log)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(out).ReadString('\n') // it answered, so it logged
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	lines, err := fakeclaudelog.Read(log)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3: %+v", len(lines), lines)
	}
	argv, _ := New(Config{Binary: fakeClaude(t)}).Command(req)
	if !slices.Equal(lines[0].Argv, argv) || lines[0].Cwd != repo || lines[0].EnvHasClaudeCode || !lines[0].StdinIsDevNull ||
		lines[0].UID != os.Getuid() || lines[0].PID == 0 {
		t.Errorf("first run logged %+v; want argv %q, cwd %s, no CLAUDECODE, stdin /dev/null, uid %d", lines[0], argv, repo, os.Getuid())
	}
	if !lines[1].EnvHasClaudeCode {
		t.Errorf("second run logged %+v, want env_has_CLAUDECODE", lines[1])
	}
	if lines[2].StdinIsDevNull {
		t.Errorf("a run with an open stdin pipe logged stdin_is_devnull: %+v", lines[2])
	}
}

// startHang starts the fake on a hang script in its own process group and
// reads its output until it says it hangs. It returns the command, the
// scanner positioned after that event, the parser, and the child's pid.
func startHang(t *testing.T, hang map[string]any) (*exec.Cmd, *bufio.Scanner, backend.Parser, int) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pids")
	hang["pid_file"] = pidFile
	req := backend.Request{Repository: t.TempDir(), Task: "hang"}
	b := New(Config{Binary: fakeClaude(t)})
	argv, _ := b.Command(req)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = req.Repository, env(t.TempDir(), writeScript(t, map[string]any{"steps": []any{map[string]any{"hang": hang}}}))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a buffer: Wait then waits for the fake alone, not for
	// every holder of its stderr.
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	p := b.NewParser(req)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		for _, e := range p.Line(sc.Bytes()) {
			if e.Kind == backend.KindText && strings.HasPrefix(e.Text, "hanging") {
				var pid, child int
				b, err := os.ReadFile(pidFile)
				if _, serr := fmt.Sscan(string(b), &pid, &child); err != nil || serr != nil || pid != cmd.Process.Pid || child <= 0 {
					t.Fatalf("pid file %q (%v), want %d and a child", b, err, cmd.Process.Pid)
				}
				return cmd, sc, p, child
			}
		}
	}
	t.Fatalf("the fake ended without hanging (%v)", sc.Err())
	return nil, nil, nil, 0
}

// TestFakeHang: a hanging fake and its child go when the group gets
// SIGTERM, and the fake prints the CLI's interrupted result on the way.
func TestFakeHang(t *testing.T) {
	t.Parallel()
	cmd, sc, p, _ := startHang(t, map[string]any{})
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// EOF comes only when both are gone: the child holds stdout too.
	var events []backend.Event
	for sc.Scan() {
		events = append(events, p.Line(sc.Bytes())...)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("exit code %d, want 143", code)
	}
	res := p.Finish(cmd.ProcessState.ExitCode(), "")
	if got := backendtest.Kinds(events); !slices.Equal(got, []backend.Kind{backend.KindResult}) || !res.IsError {
		t.Errorf("after SIGTERM: events %v, result %+v; want one error result", got, res)
	}
}

// TestFakeHangLeavesAChild: with a child that ignores SIGTERM, the fake
// exits but its child lives on holding stdout, until the group is killed.
func TestFakeHangLeavesAChild(t *testing.T) {
	t.Parallel()
	cmd, sc, p, child := startHang(t, map[string]any{"child_ignores_sigterm": true})
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		if slices.ContainsFunc(p.Line(sc.Bytes()), func(e backend.Event) bool { return e.Kind == backend.KindResult }) {
			break
		}
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 143 {
		t.Errorf("exit code %d, want 143", code)
	}
	if err := syscall.Kill(child, 0); err != nil {
		t.Errorf("the child %d is gone after SIGTERM (%v); it should ignore it", child, err)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Errorf("killing the group: %v", err)
	}
}

// TestFakeMCPCall: an mcp_call step calls a tool on a real MCP server over
// streamable HTTP, with the headers of --mcp-config.
func TestFakeMCPCall(t *testing.T) {
	t.Parallel()
	const token = "a-long-random-test-token"
	server := mcp.NewServer(&mcp.Implementation{Name: "meshwork-test", Version: "v0"}, nil)
	type spawnIn struct {
		WorkerID string `json:"worker_id"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "spawn_worker", Description: "test"}, func(_ context.Context, _ *mcp.CallToolRequest, in spawnIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "spawned " + in.WorkerID}}}, nil, nil
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	config := filepath.Join(t.TempDir(), "mcp.json")
	cfg := fmt.Sprintf(`{"mcpServers":{"meshwork":{"type":"http","url":%q,"headers":{"Authorization":"Bearer ${MESH_TOKEN}"}}}}`, srv.URL)
	if err := os.WriteFile(config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, map[string]any{
		"steps": []any{map[string]any{"mcp_call": map[string]any{"server": "meshwork", "tool": "spawn_worker", "arguments": map[string]any{"worker_id": "w-7"}}}},
		"reply": "spawned it",
	})
	call := func(tokenEnv string) (backend.Event, backend.Result) {
		p := runBackend(t, backend.Request{Repository: t.TempDir(), Task: "spawn", Settings: backend.Settings{MCPConfig: config}}, env(t.TempDir(), script, "MESH_TOKEN="+tokenEnv))
		if initField(t, p.Stdout, "type") != "system" {
			t.Fatal("no init")
		}
		i := slices.IndexFunc(p.Events, func(e backend.Event) bool { return e.Kind == backend.KindToolResult })
		if i < 0 {
			t.Fatalf("no tool result: %+v\nstderr %s", p.Events, p.Stderr)
		}
		return p.Events[i], p.Result
	}

	got, res := call(token)
	want := backend.Event{Kind: backend.KindToolResult, SessionID: res.SessionID, Tool: "mcp__meshwork__spawn_worker", ToolCallID: got.ToolCallID, Text: "spawned w-7"}
	if !strings.HasPrefix(got.ToolCallID, "toolu_") {
		t.Errorf("tool result's call id %q, want the tool_use's toolu_ id", got.ToolCallID)
	}
	if got != want || res.IsError || !slices.Equal(res.ToolsUsed, []string{"mcp__meshwork__spawn_worker"}) {
		t.Errorf("tool result %+v, result %+v; want %+v", got, res, want)
	}

	refused, _ := call("wrong-token")
	if !refused.IsError || !strings.Contains(refused.Text, "connecting") {
		t.Errorf("with a wrong token: %+v, want an error tool result", refused)
	}
}
