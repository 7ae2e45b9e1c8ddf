package mesh_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/executortest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mesh"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/meshexectest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

func TestMain(m *testing.M) {
	code := m.Run()
	meshexectest.RemoveBinaries()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// newExecutor returns an executor on srv's endpoint with token, closed at
// the end of the test with its HTTP connections.
func newExecutor(t *testing.T, endpoint, token string) *mesh.Executor {
	t.Helper()
	return newExecutorLogging(t, endpoint, token, nil)
}

func newExecutorLogging(t *testing.T, endpoint, token string, logger *slog.Logger) *mesh.Executor {
	t.Helper()
	ex, err := mesh.New(mesh.Config{Endpoint: endpoint, Token: token, HTTPClient: executortest.HTTPClient(t), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	return ex
}

func setup(t *testing.T, opts meshexectest.Options) (*mesh.Executor, *meshexectest.Server) {
	t.Helper()
	srv := meshexectest.Start(t, opts)
	return newExecutor(t, srv.Endpoint, srv.Token), srv
}

// sessions records what OnSession was given.
type sessions struct {
	mu  sync.Mutex
	ids []string
}

func (s *sessions) record(id string) {
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
}

func (s *sessions) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

func request(task, session string, on func(string)) executor.Request {
	return executor.Request{
		RunID: "run-1", NodeID: "research", Thread: "thread-1", RoleName: "researcher",
		Role: pipeline.Role{Via: pipeline.ViaMesh, Repository: "research"},
		Task: task, SessionID: session, OnSession: on,
	}
}

// A first call starts a session and reports it; a second one resumes it.
// The role's system prompt opens the first task only.
func TestExecuteStartsAndResumes(t *testing.T) {
	t.Parallel()
	ex, srv := setup(t, meshexectest.Options{})
	var got sessions
	req := request("first task", "", got.record)
	req.Role.SystemPromptText = "You are a careful researcher.\n"
	res, err := ex.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if want := "ok: You are a careful researcher.\n\nfirst task"; res.Output != want {
		t.Errorf("output %q; want %q", res.Output, want)
	}
	if res.SessionID == "" || res.CostUSD <= 0 {
		t.Fatalf("result %+v: want a session and a cost", res)
	}
	// OnSession ran before Execute returned, with that session only.
	if ids := got.get(); len(ids) != 1 || ids[0] != res.SessionID {
		t.Errorf("OnSession got %q; want [%s]", ids, res.SessionID)
	}

	var again sessions
	req = request("second task", res.SessionID, again.record)
	req.Role.SystemPromptText = "You are a careful researcher.\n"
	res2, err := ex.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Output != "ok: second task" || res2.SessionID != res.SessionID {
		t.Errorf("resume: %+v; want output %q in session %s", res2, "ok: second task", res.SessionID)
	}
	if ids := again.get(); len(ids) != 1 || ids[0] != res.SessionID {
		t.Errorf("resume: OnSession got %q; want [%s]", ids, res.SessionID)
	}
	runs := srv.Invocations(t)
	if len(runs) != 2 {
		t.Fatalf("%d agent runs; want 2", len(runs))
	}
	argv := runs[1].Args()
	if !strings.Contains(argv, "--resume "+res.SessionID) {
		t.Errorf("second run's argv %s does not resume %s", argv, res.SessionID)
	}
}

// A fork's node works in a copy of its seeded session: the result names a
// new session, which OnSession reports, and the seeded one is left alone.
func TestExecuteForksASession(t *testing.T) {
	t.Parallel()
	ex, srv := setup(t, meshexectest.Options{})
	first, err := ex.Execute(context.Background(), request("first task", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	var got sessions
	req := request("in the fork", first.SessionID, got.record)
	req.ForkSession = true
	fork, err := ex.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if fork.SessionID == "" || fork.SessionID == first.SessionID {
		t.Fatalf("fork's session %q; want a new one, not %s", fork.SessionID, first.SessionID)
	}
	if ids := got.get(); len(ids) != 1 || ids[0] != fork.SessionID {
		t.Errorf("OnSession got %q; want [%s]", ids, fork.SessionID)
	}
	runs := srv.Invocations(t)
	if len(runs) != 2 || !strings.Contains(runs[1].Args(), "--resume "+first.SessionID+" --fork-session") {
		t.Errorf("the fork's run: %v", runs)
	}
}

// The session is reported while the agent still runs (from the progress
// notification of its init event), to the right one of concurrent calls,
// so that a node cut off in the middle can resume it.
func TestSessionReportedWhileRunning(t *testing.T) {
	t.Parallel()
	// The first turn of a session hangs until stopped; a resume replies.
	ex, _ := setup(t, meshexectest.Options{Script: map[string]any{"turns": []any{
		map[string]any{"steps": []any{map[string]any{"hang": map[string]any{}}}},
		map[string]any{},
	}}})
	type outcome struct {
		res executor.Result
		err error
	}
	const calls = 2
	reported := make([]chan string, calls)
	done := make([]chan outcome, calls)
	for i := range calls {
		reported[i], done[i] = make(chan string, 4), make(chan outcome, 1)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() {
			res, err := ex.Execute(ctx, request(fmt.Sprintf("task %d", i), "", func(id string) {
				reported[i] <- id
				cancel() // the node is cut off once its session is known
			}))
			done[i] <- outcome{res, err}
		}()
	}
	ids := make([]string, calls)
	for i := range calls {
		select {
		case ids[i] = <-reported[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("call %d: no session reported while the agent runs", i)
		}
	}
	if ids[0] == "" || ids[0] == ids[1] {
		t.Fatalf("sessions %q: want two distinct ones", ids)
	}
	for i := range calls {
		o := <-done[i]
		if !errors.Is(o.err, context.Canceled) {
			t.Errorf("call %d: error %v; want context.Canceled", i, o.err)
		}
		if o.res.SessionID != ids[i] {
			t.Errorf("call %d: result session %q; want %s", i, o.res.SessionID, ids[i])
		}
	}
	// The interrupted session resumes.
	res, err := ex.Execute(context.Background(), request("go on", ids[0], nil))
	if err != nil || res.Output != "ok: go on" || res.SessionID != ids[0] {
		t.Fatalf("resume: %+v, %v; want ok: go on in session %s", res, err, ids[0])
	}
}

// A failure the agent reports is an error with mesh-exec's message, and
// the partial result still carries the session and the cost.
func TestAgentFailure(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts meshexectest.Options
		want string
	}{
		"fail step":     {meshexectest.Options{Script: map[string]any{"steps": []any{map[string]any{"text": "working"}, map[string]any{"fail": "boom"}}}}, "mesh_execute: boom"},
		"not logged in": {meshexectest.Options{LoggedOut: true}, "mesh_execute: Claude Code is not logged in"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex, _ := setup(t, tc.opts)
			var got sessions
			res, err := ex.Execute(context.Background(), request("try", "", got.record))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %v; want %q...", err, tc.want)
			}
			if res.SessionID == "" || !strings.Contains(err.Error(), res.Output) {
				t.Errorf("partial result %+v: want the session and the agent's message", res)
			}
			if ids := got.get(); len(ids) == 0 || ids[0] != res.SessionID {
				t.Errorf("OnSession got %q; want %s", ids, res.SessionID)
			}
		})
	}
}

// The role's timeout goes to mesh_execute (in milliseconds), which stops
// the agent and returns what it had.
func TestTimeout(t *testing.T) {
	t.Parallel()
	ex, _ := setup(t, meshexectest.Options{Script: map[string]any{"steps": []any{map[string]any{"hang": map[string]any{}}}}})
	req := request("hang", "", nil)
	req.Role.Timeout = 1500
	start := time.Now()
	res, err := ex.Execute(context.Background(), req)
	if err == nil || !strings.HasPrefix(err.Error(), "mesh_execute: ") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("error %v; want mesh_execute's timeout", err)
	}
	if res.SessionID == "" {
		t.Errorf("result %+v: want the session", res)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %s; the timeout was 1.5s", d)
	}
}

// A wrong token fails clearly, without a retry loop.
func TestBadToken(t *testing.T) {
	t.Parallel()
	srv := meshexectest.Start(t, meshexectest.Options{})
	ex := newExecutor(t, srv.Endpoint, "not-the-token-0123456789")
	_, err := ex.Execute(context.Background(), request("x", "", nil))
	if err == nil || !strings.Contains(err.Error(), "refused the bearer token") || !strings.Contains(err.Error(), srv.Endpoint) {
		t.Fatalf("error %v; want a refused token at %s", err, srv.Endpoint)
	}
	if _, err := mesh.New(mesh.Config{Endpoint: srv.Endpoint}); err == nil {
		t.Error("New without a token: no error")
	}
}

// mesh-exec's HTTP endpoint is stateless (MCP 2026-07-28): it keeps no
// MCP session, so after it restarts the very next call works, and the
// agent session resumes.
func TestWorksAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := meshexectest.Start(t, meshexectest.Options{})
	ex := newExecutor(t, srv.Endpoint, srv.Token)
	res, err := ex.Execute(context.Background(), request("one", "", nil))
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	res2, err := ex.Execute(context.Background(), request("two", res.SessionID, nil))
	if err != nil {
		t.Fatalf("the first call after a restart: %v", err)
	}
	if res2.SessionID != res.SessionID || res2.Output != "ok: two" {
		t.Errorf("after a restart: %+v; want ok: two in session %s", res2, res.SessionID)
	}
	if runs := srv.Invocations(t); len(runs) != 2 {
		t.Errorf("%d agent runs; want 2", len(runs))
	}
}

// mesh-exec crashing during a call fails the call, which is not made again
// (the agent may have done its work); the next call works on a new MCP
// session and resumes the agent's.
func TestCrashDuringCallIsNotRepeated(t *testing.T) {
	t.Parallel()
	// The first turn of a session hangs; a resume replies.
	srv := meshexectest.Start(t, meshexectest.Options{Script: map[string]any{"turns": []any{
		map[string]any{"steps": []any{map[string]any{"hang": map[string]any{}}}},
		map[string]any{},
	}}})
	ex := newExecutor(t, srv.Endpoint, srv.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reported := make(chan string, 4)
	type outcome struct {
		res executor.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := ex.Execute(ctx, request("one", "", func(id string) { reported <- id }))
		done <- outcome{res, err}
	}()
	var session string
	select {
	case session = <-reported:
	case <-time.After(30 * time.Second):
		t.Fatal("no session reported while the agent runs")
	}
	srv.Kill()
	srv.Restart(t)
	o := <-done
	if o.err == nil || ctx.Err() != nil {
		t.Fatalf("the call cut off by the crash: %+v, %v; want an error, at once", o.res, o.err)
	}
	if runs := srv.Invocations(t); len(runs) != 1 {
		t.Fatalf("%d agent runs; want 1 (the call not made again)", len(runs))
	}
	// Bounded, so that a call that never returns fails here with the
	// servers' logs instead of at the package's timeout.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	res, err := ex.Execute(ctx2, request("two", session, nil))
	if err != nil || res.Output != "ok: two" || res.SessionID != session {
		t.Fatalf("after the crash: %+v, %v; want ok: two in session %s", res, err, session)
	}
}

// mesh-exec can also run as a child, over stdio.
func TestStdio(t *testing.T) {
	t.Parallel()
	argv, env := meshexectest.StdioCommand(t, meshexectest.Options{})
	ex, err := mesh.New(mesh.Config{Command: argv, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	res, err := ex.Execute(context.Background(), request("over stdio", "", nil))
	if err != nil || res.Output != "ok: over stdio" || res.SessionID == "" {
		t.Fatalf("%+v, %v", res, err)
	}
	res2, err := ex.Execute(context.Background(), request("again", res.SessionID, nil))
	if err != nil || res2.SessionID != res.SessionID {
		t.Fatalf("resume: %+v, %v", res2, err)
	}
}

// The mesh executor passes the executors' conformance suite against a real
// mesh-exec.
func TestConformance(t *testing.T) {
	t.Parallel()
	ex, _ := setup(t, meshexectest.Options{})
	executortest.Run(t, executortest.Harness{
		Executor: ex, RoleName: "researcher",
		Role: func(thread string) pipeline.Role {
			return pipeline.Role{Via: pipeline.ViaMesh, Repository: "repo-" + thread}
		},
	})
}
