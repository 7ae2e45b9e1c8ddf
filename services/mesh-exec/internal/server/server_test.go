package server_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/server"
)

// script writes a fake claude script and returns the env entry naming it.
func script(t testing.TB, s map[string]any) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.json")
	b, _ := json.Marshal(s)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return "FAKE_CLAUDE_SCRIPT=" + p
}

// waitFor polls until cond holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pids reads the hang step's pid file: the fake and its child.
func pids(t testing.TB, file string) []int {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// alive reports whether a process exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// The first call creates a session; the second resumes it in the same
// repository, over stdio and over HTTP, and a restarted mesh-exec still
// knows it.
func TestSessionCreateAndResume(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			connect := func() *mcp.ClientSession {
				if transport == "http" {
					cs, _, _ := e.http(t)
					return cs
				}
				cs, _ := e.stdio(t, nil, nil)
				return cs
			}
			cs := connect()
			first := execute(t, cs, map[string]any{"repository": "research", "task": "say hi", "timeout": 60000})
			if first.isError || len(first.out.SessionID) != 36 || first.out.Output != "ok: say hi" {
				t.Fatalf("first call: %+v", first)
			}
			md := first.out.Metadata
			if md["backend"] != "claude" || md["is_error"] != false || md["cost_usd"].(float64) <= 0 || md["exit_code"].(float64) != 0 {
				t.Errorf("metadata: %v", md)
			}
			second := execute(t, cs, map[string]any{"task": "again", "session_id": first.out.SessionID})
			if second.isError || second.out.SessionID != first.out.SessionID {
				t.Fatalf("resume: %+v", second)
			}
			_ = cs.Close()
			third := execute(t, connect(), map[string]any{"task": "after a restart", "session_id": first.out.SessionID})
			if third.isError || third.out.SessionID != first.out.SessionID {
				t.Fatalf("resume after a restart: %+v", third)
			}

			calls := e.invocations(t)
			if len(calls) != 3 {
				t.Fatalf("fake ran %d times, want 3", len(calls))
			}
			repo, _ := filepath.EvalSymlinks(filepath.Join(e.root, "research"))
			for i, c := range calls {
				argv := c.Args()
				if resumed := strings.Contains(argv, "--resume "+first.out.SessionID); resumed != (i > 0) {
					t.Errorf("call %d: resumed=%v: %s", i, resumed, argv)
				}
				if c.Cwd != repo {
					t.Errorf("call %d ran in %v, want %s", i, c.Cwd, repo)
				}
				if c.EnvHasClaudeCode || c.EnvHasCodeEntrypoint || !c.StdinIsDevNull {
					t.Errorf("call %d: CLAUDECODE %v, ENTRYPOINT %v, stdin /dev/null %v", i, c.EnvHasClaudeCode, c.EnvHasCodeEntrypoint, c.StdinIsDevNull)
				}
			}
		})
	}
}

// A resume always runs in the session's repository.
func TestResumeStaysInRepository(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs, _ := e.stdio(t, nil, nil)
	first := execute(t, cs, map[string]any{"repository": "a", "task": "x"})
	if r := execute(t, cs, map[string]any{"repository": "b", "task": "y", "session_id": first.out.SessionID}); !r.isError || !strings.Contains(r.text, "belongs to repository") {
		t.Errorf("resume in another repository: %+v", r)
	}
	if r := execute(t, cs, map[string]any{"repository": "a", "task": "y", "session_id": first.out.SessionID}); r.isError {
		t.Errorf("resume naming its own repository: %+v", r)
	}
	// The repository made a link out of the workspace root since: the
	// resume is refused, as a new call there is.
	outside := t.TempDir()
	if err := os.RemoveAll(filepath.Join(e.root, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.root, "a")); err != nil {
		t.Fatal(err)
	}
	if r := execute(t, cs, map[string]any{"task": "y", "session_id": first.out.SessionID}); !r.isError || !strings.Contains(r.text, "no longer inside the workspace root") {
		t.Errorf("resume in a repository that now leads out of the root: %+v", r)
	}
}

// fork_session continues a copy of a session under a new id (claude's
// --fork-session): the fork resumes after that as its own session, and the
// session it came from goes on as it was. It needs a session_id.
func TestForkSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs, _ := e.stdio(t, nil, nil)
	first := execute(t, cs, map[string]any{"repository": "a", "task": "x"})
	fork := execute(t, cs, map[string]any{"task": "y", "session_id": first.out.SessionID, "fork_session": true})
	if fork.isError || len(fork.out.SessionID) != 36 || fork.out.SessionID == first.out.SessionID {
		t.Fatalf("fork: %+v; want a new session", fork)
	}
	if again := execute(t, cs, map[string]any{"task": "z", "session_id": fork.out.SessionID}); again.isError || again.out.SessionID != fork.out.SessionID {
		t.Errorf("resuming the fork: %+v", again)
	}
	if orig := execute(t, cs, map[string]any{"task": "w", "session_id": first.out.SessionID}); orig.isError || orig.out.SessionID != first.out.SessionID {
		t.Errorf("resuming the original: %+v", orig)
	}
	calls := e.invocations(t)
	if len(calls) != 4 || !strings.Contains(calls[1].Args(), "--resume "+first.out.SessionID+" --fork-session") || strings.Contains(calls[2].Args(), "--fork-session") {
		t.Errorf("the fake's argv: %v", calls)
	}
	if r := execute(t, cs, map[string]any{"repository": "a", "task": "x", "fork_session": true}); !r.isError || !strings.Contains(r.text, "fork_session needs the session_id") {
		t.Errorf("fork without a session: %+v", r)
	}
}

// Two calls on one session at once: the second waits (default) or is refused.
func TestOneRunPerSession(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"wait", "refuse"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			pidFile := filepath.Join(t.TempDir(), "pids")
			sc := script(t, map[string]any{"turns": []any{
				map[string]any{"reply": "started"},
				map[string]any{"steps": []any{map[string]any{"hang": map[string]any{"pid_file": pidFile}}}},
				map[string]any{"reply": "second"},
			}})
			cs, _ := e.stdio(t, nil, []string{"--busy", mode}, sc)
			id := execute(t, cs, map[string]any{"repository": "r", "task": "start"}).out.SessionID

			var wg sync.WaitGroup
			var first result
			var firstDone time.Time
			wg.Go(func() {
				first = execute(t, cs, map[string]any{"task": "hang", "session_id": id, "timeout": 1500})
				firstDone = time.Now()
			})
			waitFor(t, "the first run to start", func() bool { return len(pids(t, pidFile)) > 0 })
			second := execute(t, cs, map[string]any{"task": "next", "session_id": id})
			secondDone := time.Now()
			wg.Wait()
			if !first.isError || !strings.Contains(first.out.Output, "timeout") {
				t.Errorf("first run: %+v", first)
			}
			switch mode {
			case "wait":
				if second.isError || second.out.Output != "second" || secondDone.Before(firstDone) {
					t.Errorf("second run did not wait for the first: %+v", second)
				}
			case "refuse":
				if !second.isError || !strings.Contains(second.text, "busy") || secondDone.After(firstDone) {
					t.Errorf("second run was not refused at once: %+v", second)
				}
			}
		})
	}
}

// A timeout stops the agent's whole process group (SIGTERM, then SIGKILL for
// what ignores it) and returns the partial output as an error.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	for name, hang := range map[string]map[string]any{
		"obeys SIGTERM":  {},
		"ignores it too": {"ignore_sigterm": true, "child_ignores_sigterm": true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			pidFile := filepath.Join(t.TempDir(), "pids")
			hang["pid_file"] = pidFile
			sc := script(t, map[string]any{"steps": []any{map[string]any{"text": "partial work"}, map[string]any{"hang": hang}}})
			cs, _ := e.stdio(t, nil, nil, sc)
			start := time.Now()
			r := execute(t, cs, map[string]any{"repository": "r", "task": "hang", "timeout": 1000})
			if !r.isError || r.out.Metadata["is_error"] != true || !strings.Contains(r.out.Output, "timeout") || !strings.Contains(r.out.Output, "partial work") {
				t.Errorf("timed-out run: %+v", r)
			}
			if time.Since(start) > 15*time.Second {
				t.Errorf("the timeout took %s", time.Since(start))
			}
			ps := pids(t, pidFile)
			if len(ps) != 2 {
				t.Fatalf("pid file: %v", ps)
			}
			waitFor(t, "the agent's processes to be gone", func() bool { return !alive(ps[0]) && !alive(ps[1]) })
		})
	}
}

// A session a call starts is busy from the moment it is named: a second
// call naming it (its id is in the first call's progress, and in the
// session store) is refused while the first runs, not run beside it.
func TestANewSessionIsBusyWhileItRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	sc := script(t, map[string]any{"steps": []any{map[string]any{"hang": map[string]any{"pid_file": pidFile}}}})
	cs, _ := e.stdio(t, nil, []string{"--busy", "refuse"}, sc)
	firstDone := make(chan result, 1)
	go func() {
		firstDone <- execute(t, cs, map[string]any{"repository": "r", "task": "hang", "timeout": 3000})
	}()
	sessions := filepath.Join(e.root, ".meshwork", "sessions")
	var id string
	waitFor(t, "the new session to be recorded", func() bool {
		entries, _ := os.ReadDir(sessions)
		for _, en := range entries {
			if name, ok := strings.CutSuffix(en.Name(), ".json"); ok {
				id = name
				return true
			}
		}
		return false
	})
	second := execute(t, cs, map[string]any{"task": "next", "session_id": id, "timeout": 1000}) // run beside it, it would hang too
	first := <-firstDone
	if !second.isError || !strings.Contains(second.text, "busy") {
		t.Errorf("a call on the session the first call started, while it ran: %+v, want refused as busy", second)
	}
	if !first.isError || !strings.Contains(first.out.Output, "timeout") {
		t.Errorf("first run: %+v", first)
	}
}

// A timeout longer than any Duration is the longest one there is, not
// one that overflowed into none: the run ends as it would.
func TestAHugeTimeoutIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cs, _ := e.stdio(t, nil, nil)
	r := execute(t, cs, map[string]any{"repository": "a", "task": "x", "timeout": 9e15})
	if r.isError || r.out.Output != "ok: x" {
		t.Errorf("a run with a huge timeout: %+v", r)
	}
}

// A client's cancellation stops the agent.
func TestClientCancellation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	cs, _ := e.stdio(t, nil, nil, script(t, map[string]any{"steps": []any{map[string]any{"hang": map[string]any{"pid_file": pidFile}}}}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mesh_execute", Arguments: map[string]any{"repository": "r", "task": "hang", "timeout": 600000}})
		done <- err
	}()
	waitFor(t, "the run to start", func() bool { return len(pids(t, pidFile)) == 2 })
	cancel()
	if err := <-done; err == nil {
		t.Error("a cancelled call returned no error")
	}
	ps := pids(t, pidFile)
	waitFor(t, "the agent's processes to be gone", func() bool { return !alive(ps[0]) && !alive(ps[1]) })
}

// At the end of its input mesh-exec stops its agents before it exits, even
// with a call in flight. (The SDK's client waits for in-flight calls before
// it closes the server's stdin, so the test holds the pipe itself.)
func TestStdinEOFStopsChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command(bins.meshExec, "serve", "--transport", "stdio")
	cmd.Env = e.environ(script(t, map[string]any{"steps": []any{map[string]any{"hang": map[string]any{"pid_file": pidFile}}}}))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "mesh_execute", Arguments: map[string]any{"repository": "r", "task": "hang"}})
	}()
	waitFor(t, "the run to start", func() bool { return len(pids(t, pidFile)) == 2 })
	ps := pids(t, pidFile)
	if err := stdin.Close(); err != nil { // end of input, a call still running
		t.Fatal(err)
	}
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
		exited <- nil // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("mesh-exec did not exit at the end of its input")
	}
	waitFor(t, "the agent's processes to be gone", func() bool { return !alive(ps[0]) && !alive(ps[1]) })
}

// Every stream event becomes a progress notification when the client asks.
func TestProgressNotifications(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, req.Params)
		mu.Unlock()
	}}
	sc := script(t, map[string]any{"steps": []any{
		map[string]any{"text": "reading"},
		map[string]any{"write": map[string]any{"file_path": "out.md", "content": "# report\n"}},
		map[string]any{"text": "done"},
	}})
	cs, _ := e.stdio(t, opts, nil, sc)
	params := &mcp.CallToolParams{Name: "mesh_execute", Arguments: map[string]any{"repository": "r", "task": "write a report"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(raw), `"files_modified":["`) || !strings.Contains(string(raw), "out.md") || !strings.Contains(string(raw), `"tools_used":["Write"]`) {
		t.Errorf("metadata: %s", raw)
	}
	if _, err := os.Stat(filepath.Join(e.root, "r", "out.md")); err != nil {
		t.Errorf("the agent's file: %v", err)
	}
	var out struct {
		SessionID string `json:"session_id"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.SessionID == "" {
		t.Fatalf("no session id in %s (%v)", raw, err)
	}
	waitFor(t, "progress notifications", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 4 })
	mu.Lock()
	defer mu.Unlock()
	withSession := 0
	for i, p := range got {
		if p.ProgressToken != "tok-1" || (i > 0 && p.Progress <= got[i-1].Progress) || p.Message == "" {
			t.Errorf("notification %d: %+v", i, p)
		}
		// The init event's notification names the agent's session in
		// _meta, so a client can save it before the call returns.
		if id, ok := p.Meta[server.SessionMetaKey]; ok {
			withSession++
			if id != out.SessionID || !strings.HasPrefix(p.Message, "init") {
				t.Errorf("notification %d: _meta %v, message %q; want session %s on the init event", i, p.Meta, p.Message, out.SessionID)
			}
		}
	}
	if withSession != 1 {
		t.Errorf("%d notifications carry %s; want 1 (the init event's)", withSession, server.SessionMetaKey)
	}
}

// Bad input gets a clear error and runs nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(e.root, "link-out")); err != nil {
		t.Fatal(err)
	}
	cs, _ := e.stdio(t, nil, nil)
	for name, tc := range map[string]struct {
		args map[string]any
		want string
	}{
		"repository outside": {map[string]any{"repository": "../escape", "task": "x"}, "outside the workspace root"},
		"absolute outside":   {map[string]any{"repository": "/etc", "task": "x"}, "outside the workspace root"},
		"symlink outside":    {map[string]any{"repository": "link-out/sub", "task": "x"}, "outside the workspace root"},
		"no repository":      {map[string]any{"task": "x"}, "repository is required"},
		"unknown session":    {map[string]any{"task": "x", "session_id": "00000000-0000-4000-8000-000000000000"}, "unknown session_id"},
		"session id as flag": {map[string]any{"task": "x", "session_id": "--dangerously-skip-permissions"}, "unknown session_id"},
		"task of several MB": {map[string]any{"repository": "r", "task": strings.Repeat("x", 3<<20)}, "the limit is"},
		"empty task":         {map[string]any{"repository": "r", "task": "  "}, "task is required"},
		"negative timeout":   {map[string]any{"repository": "r", "task": "x", "timeout": -5}, "timeout must not be negative"},
	} {
		r := execute(t, cs, tc.args)
		if !r.isError || !strings.Contains(r.text, tc.want) {
			t.Errorf("%s: got %+v, want an error containing %q", name, r.text, tc.want)
		}
		// A refusal's structured content is its error (meshapi), never a
		// result that would contradict it.
		if e, _ := r.raw["error"].(map[string]any); len(r.raw) != 1 || e["code"] == "" || e["code"] == nil {
			t.Errorf("%s: structured content %v, want only the error with its code", name, r.raw)
		}
	}
	if n := len(e.invocations(t)); n != 0 {
		t.Errorf("bad input ran the agent %d times", n)
	}
	if _, err := os.Stat(filepath.Join(outside, "sub")); err == nil {
		t.Error("a directory was created outside the workspace root")
	}
}

// A missing CLI and a CLI without credentials are reported with what to do.
func TestAgentUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	missing, _ := e.stdio(t, nil, []string{"--binary", filepath.Join(t.TempDir(), "no-such-claude")})
	if r := execute(t, missing, map[string]any{"repository": "r", "task": "x"}); !r.isError || !strings.Contains(r.text, "agent CLI not found") {
		t.Errorf("missing binary: %+v", r)
	}
	loggedOut, _ := e.stdio(t, nil, nil, "ANTHROPIC_API_KEY=")
	r := execute(t, loggedOut, map[string]any{"repository": "r", "task": "x"})
	if !r.isError || !strings.Contains(r.text, "ANTHROPIC_API_KEY") || r.out.Metadata["is_error"] != true {
		t.Errorf("not logged in: %+v", r)
	}
}

// An agent that fills the workspace past its quota is stopped, with the
// reason; the next run is refused while the workspace is over it.
func TestWorkspaceQuotaStopsTheAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	chunk := strings.Repeat("x", 600_000)
	sc := script(t, map[string]any{"steps": []any{
		map[string]any{"write": map[string]any{"file_path": "fill-1.txt", "content": chunk}},
		map[string]any{"write": map[string]any{"file_path": "fill-2.txt", "content": chunk}},
		map[string]any{"hang": map[string]any{}},
	}})
	cs, _ := e.stdio(t, nil, []string{"--max-workspace-bytes", "1000000"}, sc)
	r := execute(t, cs, map[string]any{"repository": "r", "task": "fill", "timeout": 60_000})
	if !r.isError || !strings.Contains(r.out.Output, "over its quota of 1000000 bytes") {
		t.Fatalf("run past the quota: %+v", r)
	}
	again := execute(t, cs, map[string]any{"repository": "r", "task": "more"})
	if !again.isError || !strings.Contains(again.text, "mesh_execute refused") {
		t.Fatalf("run over the quota: %+v", again)
	}
	if err := os.RemoveAll(filepath.Join(e.root, "r")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.root, "r"), 0o755); err != nil {
		t.Fatal(err)
	}
	// With the files gone the agent runs again (and, scripted the same,
	// is stopped again).
	after := execute(t, cs, map[string]any{"repository": "r", "task": "after"})
	if strings.Contains(after.text, "mesh_execute refused") || !strings.Contains(after.out.Output, "the agent was stopped: ") {
		t.Errorf("a run after the files were deleted: %+v", after)
	}
}
