package marketplace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/executortest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/marketplace"
	"github.com/meshwork/meshwork/services/orchestrator/internal/marketplacetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

const token = "marketplace-test-token-0123456789"

// fakeMarketplace stands in for the marketplace's MCP server, only as far as
// the executor uses it: spawn_worker, get_worker_state and execute_in_worker
// over streamable HTTP with a bearer token, journeys in memory, every call
// recorded. Its workers: echo_v1 returns the task as a string output,
// json_v1 an object that is not an agent's, and any other worker acts as an
// agent worker (the output is mesh_execute's result, the journey keeps the
// session). A task containing "rm -rf" is refused by the gate; a task
// "fail" fails in the worker.
type fakeMarketplace struct {
	mu       sync.Mutex
	journeys map[string]*fakeJourney
	spawns   []spawnIn
	states   int
	executes []executeCall
}

type fakeJourney struct {
	worker, state, session string
}

type spawnIn struct {
	WorkerID  string `json:"worker_id"`
	JourneyID string `json:"journey_id"`
	Mode      string `json:"mode,omitempty"`
}

type journeyIn struct {
	JourneyID string `json:"journey_id"`
}

type executeCall struct {
	JourneyID string         `json:"journey_id"`
	Action    map[string]any `json:"action"`
}

// The marketplace's journey id format.
var journeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func (f *fakeMarketplace) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "fake-marketplace", Version: "v0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "spawn_worker"}, func(_ context.Context, _ *mcp.CallToolRequest, in spawnIn) (*mcp.CallToolResult, map[string]any, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.spawns = append(f.spawns, in)
		if !journeyPattern.MatchString(in.JourneyID) {
			return nil, nil, fmt.Errorf("journey_id %q is not valid", in.JourneyID)
		}
		j := f.journeys[in.JourneyID]
		switch {
		case j == nil && in.Mode == "resume":
			return nil, nil, fmt.Errorf("no journey %q to resume", in.JourneyID)
		case j == nil:
			f.journeys[in.JourneyID] = &fakeJourney{worker: in.WorkerID, state: "active"}
		case j.state == "active":
			return nil, map[string]any{"journey_id": in.JourneyID, "worker_id": j.worker, "state": "already_active"}, nil
		default:
			j.state = "active"
		}
		return nil, map[string]any{"journey_id": in.JourneyID, "worker_id": in.WorkerID, "state": "active"}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "get_worker_state"}, func(_ context.Context, _ *mcp.CallToolRequest, in journeyIn) (*mcp.CallToolResult, map[string]any, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.states++
		j := f.journeys[in.JourneyID]
		if j == nil {
			return nil, nil, fmt.Errorf("no journey %q", in.JourneyID)
		}
		return nil, map[string]any{"journey_id": in.JourneyID, "worker_id": j.worker, "state": j.state, "session_id": j.session}, nil
	})
	s.AddTool(&mcp.Tool{Name: "execute_in_worker", InputSchema: map[string]any{"type": "object"}}, f.execute)
	return s
}

func (f *fakeMarketplace) execute(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in executeCall
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.executes = append(f.executes, in)
	fail := func(msg string) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil
	}
	result := func(out map[string]any, isError bool) (*mcp.CallToolResult, error) {
		b, _ := json.Marshal(out)
		return &mcp.CallToolResult{IsError: isError, StructuredContent: out, Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
	}
	task, _ := in.Action["task"].(string)
	j := f.journeys[in.JourneyID]
	switch {
	case j == nil:
		return fail(fmt.Sprintf("no journey %q (spawn_worker creates it)", in.JourneyID))
	case strings.Contains(task, "rm -rf"):
		// The gate comes first, whatever the worker's state.
		return result(map[string]any{
			"executed": false, "action_type": "task",
			"violations": []meshtype.Violation{{ConstraintID: "no_destruction", Violated: true, Message: "the task may not delete files"}},
			"message":    "Constraint violation detected: the task may not delete files",
		}, true)
	case j.state != "active":
		return meshapi.ErrorResult(meshapi.Errorf(meshapi.CodeNotLive, "journey %q is %s; spawn_worker with mode resume restarts it with its workspace", in.JourneyID, j.state)), nil
	case task == "fail":
		return fail("Not logged in · Please run /login")
	}
	var output any
	switch j.worker {
	case "echo_v1":
		output = task
	case "json_v1":
		output = map[string]any{"text": task, "lines": 1}
	default:
		if j.session == "" {
			j.session = "session-" + in.JourneyID
		}
		output = map[string]any{"session_id": j.session, "output": "did: " + task, "metadata": map[string]any{"cost_usd": 0.5, "is_error": false}}
	}
	return result(map[string]any{"executed": true, "output": output, "session_id": j.session, "action_type": "task"}, false)
}

// setup starts the fake marketplace and returns an executor on it.
func setup(t *testing.T) (*marketplace.Executor, *fakeMarketplace, string) {
	t.Helper()
	f := &fakeMarketplace{journeys: map[string]*fakeJourney{}}
	srv := f.server()
	verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if got != token {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: "orchestrator", Expiration: time.Now().Add(time.Hour)}, nil
	}
	hs := httptest.NewServer(auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)))
	t.Cleanup(hs.Close)
	return newExecutor(t, hs.URL, token), f, hs.URL
}

func newExecutor(t *testing.T, endpoint, tok string) *marketplace.Executor {
	t.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	ex, err := marketplace.New(marketplace.Config{Endpoint: endpoint, Token: tok, HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ex.Close()
		transport.CloseIdleConnections()
	})
	return ex
}

func request(thread, role, worker, task string, onSession func(string)) executor.Request {
	return executor.Request{
		RunID: "run-1", NodeID: "write", Thread: thread, RoleName: role,
		Role: pipeline.Role{Via: pipeline.ViaMarketplace, Worker: worker},
		Task: task, OnSession: onSession,
	}
}

func journeyID(t *testing.T, role, worker, thread, item string) string {
	t.Helper()
	id, err := marketplace.JourneyID(role, worker, thread, item)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

const agentWorker = "claude_code_assistant_v1"

func TestJourneyID(t *testing.T) {
	t.Parallel()
	base := journeyID(t, "writer", agentWorker, "thread-1", "")
	if !regexp.MustCompile(`^writer-[0-9a-f]{24}$`).MatchString(base) {
		t.Errorf("JourneyID = %q; want writer-<24 hex digits>", base)
	}
	if again := journeyID(t, "writer", agentWorker, "thread-1", ""); again != base {
		t.Errorf("JourneyID is not stable: %q, then %q", base, again)
	}
	// Anything of the key makes another journey: the thread, the role, the
	// worker (a role of the same name on another worker), the item.
	seen := map[string]string{base: "base"}
	for name, id := range map[string]string{
		"thread":        journeyID(t, "writer", agentWorker, "thread-2", ""),
		"role":          journeyID(t, "reviewer", agentWorker, "thread-1", ""),
		"worker":        journeyID(t, "writer", "echo_v1", "thread-1", ""),
		"item 0":        journeyID(t, "writer", agentWorker, "thread-1", "write/0"),
		"item 1":        journeyID(t, "writer", agentWorker, "thread-1", "write/1"),
		"other node":    journeyID(t, "writer", agentWorker, "thread-1", "draft/0"),
		"shifted parts": journeyID(t, "writer", "", "thread-1"+agentWorker, ""),
	} {
		if other, ok := seen[id]; ok {
			t.Errorf("%s and %s have the same journey %q", name, other, id)
		}
		seen[id] = name
	}
	// The id stays valid and bounded whatever the thread, worker or item.
	long := "r" + strings.Repeat("x", 63)
	for _, id := range []string{
		base, journeyID(t, long, agentWorker, "thread-1", ""), journeyID(t, "writer", agentWorker, "", ""),
		journeyID(t, long, strings.Repeat("w", 500)+"_v1", strings.Repeat("t ", 100), strings.Repeat("n", 64)+"/123456"),
	} {
		if !journeyPattern.MatchString(id) || len(id) > 89 {
			t.Errorf("%q is not a valid journey id of at most 89 characters", id)
		}
	}
	if _, err := marketplace.JourneyID("-bad role", agentWorker, "t", ""); err == nil {
		t.Error("JourneyID accepted a role that makes an invalid id")
	}
}

// Each journey is spawned once per process, concurrent nodes included; the
// task runs as a task action; the agent's session is reported.
func TestSpawnsOnceAndReportsTheSession(t *testing.T) {
	t.Parallel()
	ex, f, _ := setup(t)
	var mu sync.Mutex
	var reported []string
	onSession := func(id string) { mu.Lock(); reported = append(reported, id); mu.Unlock() }

	var wg sync.WaitGroup
	results := make([]executor.Result, 3)
	errs := make([]error, 3)
	for i, thread := range []string{"thread-a", "thread-a", "thread-b"} {
		wg.Go(func() {
			results[i], errs[i] = ex.Execute(context.Background(), request(thread, "writer", "claude_code_assistant_v1", fmt.Sprintf("task %d", i), onSession))
		})
	}
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		thread := map[int]string{0: "thread-a", 1: "thread-a", 2: "thread-b"}[i]
		want := executor.Result{Output: fmt.Sprintf("did: task %d", i), SessionID: "session-" + journeyID(t, "writer", agentWorker, thread, ""), CostUSD: 0.5}
		if res != want {
			t.Errorf("call %d: %+v; want %+v", i, res, want)
		}
	}
	// A later node on the thread spawns nothing.
	if _, err := ex.Execute(context.Background(), request("thread-a", "writer", "claude_code_assistant_v1", "later", nil)); err != nil {
		t.Fatal(err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.spawns) != 2 {
		t.Fatalf("spawns %+v; want one per journey", f.spawns)
	}
	for _, s := range f.spawns {
		if s.Mode != "normal" || s.WorkerID != "claude_code_assistant_v1" {
			t.Errorf("spawn %+v; want worker claude_code_assistant_v1 in mode normal", s)
		}
	}
	if len(f.executes) != 4 {
		t.Fatalf("%d executes; want 4", len(f.executes))
	}
	if a := f.executes[3].Action; a["type"] != "task" || a["task"] != "later" || len(a) != 2 {
		t.Errorf("action %v; want {type: task, task: later}", a)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 3 {
		t.Errorf("OnSession got %q; want one call per node that had one", reported)
	}
}

// A role of the same name on another worker, and each item of a foreach
// node, have journeys of their own on one thread; an item's journey is the
// same for the item's later attempts.
func TestJourneyPerWorkerAndItem(t *testing.T) {
	t.Parallel()
	ex, f, _ := setup(t)
	ctx := context.Background()
	res, err := ex.Execute(ctx, request("thread-1", "writer", agentWorker, "node", nil))
	if err != nil {
		t.Fatal(err)
	}
	// The pipeline changed the role's worker: the old journey's session
	// (another worker's) is not continued.
	other, err := ex.Execute(ctx, request("thread-1", "writer", "other_agent_v2", "node", nil))
	if err != nil {
		t.Fatal(err)
	}
	if other.SessionID == res.SessionID {
		t.Errorf("another worker continued session %s", res.SessionID)
	}
	var wg sync.WaitGroup
	items := make([]executor.Result, 3)
	errs := make([]error, 3)
	for i := range items {
		wg.Go(func() {
			req := request("thread-1", "writer", agentWorker, fmt.Sprintf("item %d", i), nil)
			req.NodeID, req.Item = "each", fmt.Sprintf("each/%d", i)
			items[i], errs[i] = ex.Execute(ctx, req)
		})
	}
	wg.Wait()
	sessions := map[string]bool{res.SessionID: true, other.SessionID: true}
	for i, r := range items {
		if errs[i] != nil {
			t.Fatalf("item %d: %v", i, errs[i])
		}
		if want := "session-" + journeyID(t, "writer", agentWorker, "thread-1", fmt.Sprintf("each/%d", i)); r.SessionID != want {
			t.Errorf("item %d in session %q; want %q", i, r.SessionID, want)
		}
		sessions[r.SessionID] = true
	}
	if len(sessions) != 5 {
		t.Errorf("sessions %v; want 5 apart (node, other worker, 3 items)", sessions)
	}
	req := request("thread-1", "writer", agentWorker, "item 1 again", nil)
	req.NodeID, req.Item = "each", "each/1"
	if r, err := ex.Execute(ctx, req); err != nil || r.SessionID != items[1].SessionID {
		t.Errorf("item 1 again: %+v, %v; want its journey's session %s", r, err, items[1].SessionID)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	journeys := map[string]string{}
	for _, sp := range f.spawns {
		if w, ok := journeys[sp.JourneyID]; ok {
			t.Errorf("journey %s spawned twice (%s, %s)", sp.JourneyID, w, sp.WorkerID)
		}
		journeys[sp.JourneyID] = sp.WorkerID
	}
	if len(journeys) != 5 {
		t.Errorf("spawns %+v; want 5 journeys", f.spawns)
	}
}

// A stopped journey is resumed, at the first use and when it stopped
// between two nodes; the task is run once more, as it never ran.
func TestResumesStoppedJourney(t *testing.T) {
	t.Parallel()
	ex, f, _ := setup(t)
	id := journeyID(t, "writer", agentWorker, "thread-1", "")
	f.journeys[id] = &fakeJourney{worker: "claude_code_assistant_v1", state: "stopped", session: "old-session"}

	res, err := ex.Execute(context.Background(), request("thread-1", "writer", "claude_code_assistant_v1", "one", nil))
	if err != nil || res.SessionID != "old-session" {
		t.Fatalf("%+v, %v; want the journey's session", res, err)
	}
	f.mu.Lock()
	f.journeys[id].state = "orphaned" // the marketplace restarted
	f.mu.Unlock()
	res, err = ex.Execute(context.Background(), request("thread-1", "writer", "claude_code_assistant_v1", "two", nil))
	if err != nil || res.Output != "did: two" {
		t.Fatalf("after the journey stopped: %+v, %v", res, err)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.spawns) != 2 || f.spawns[0].Mode != "resume" || f.spawns[1].Mode != "resume" {
		t.Errorf("spawns %+v; want two resumes", f.spawns)
	}
	if len(f.executes) != 3 {
		t.Errorf("%d executes; want 3 (one refused as not live)", len(f.executes))
	}
}

// A refused task is a RefusedError with the violations; a failure in the
// worker is an error with its message, after which the journey is checked
// again.
func TestFailures(t *testing.T) {
	t.Parallel()
	ex, f, _ := setup(t)
	called := false
	_, err := ex.Execute(context.Background(), request("t", "writer", "claude_code_assistant_v1", "rm -rf /", func(string) { called = true }))
	var refused *marketplace.RefusedError
	if !errors.As(err, &refused) || len(refused.Violations) != 1 || refused.Violations[0].ConstraintID != "no_destruction" {
		t.Fatalf("error %v; want a RefusedError with the violation", err)
	}
	if !strings.Contains(err.Error(), "Constraint violation detected: the task may not delete files") || called {
		t.Errorf("error %q (OnSession called: %v)", err, called)
	}

	_, err = ex.Execute(context.Background(), request("t", "writer", "claude_code_assistant_v1", "fail", nil))
	if err == nil || err.Error() != "execute_in_worker: Not logged in · Please run /login" {
		t.Fatalf("error %v; want the worker's message", err)
	}
	if _, err := ex.Execute(context.Background(), request("t", "writer", "claude_code_assistant_v1", "fine", nil)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if f.states != 2 || len(f.spawns) != 2 || f.spawns[1].Mode != "normal" {
		t.Errorf("%d state checks, spawns %+v; want the journey checked again after the failure only", f.states, f.spawns)
	}
	f.mu.Unlock()

	if _, err := ex.Execute(context.Background(), request("t", "writer", "", "x", nil)); err == nil {
		t.Error("a role without a worker: no error")
	}
}

// Outputs that are not an agent's come back as text: a string as is,
// anything else as JSON.
func TestOutputs(t *testing.T) {
	t.Parallel()
	ex, _, _ := setup(t)
	res, err := ex.Execute(context.Background(), request("t", "echo", "echo_v1", "hello", nil))
	if err != nil || res.Output != "hello" || res.SessionID != "" {
		t.Errorf("string output: %+v, %v", res, err)
	}
	res, err = ex.Execute(context.Background(), request("t", "lister", "json_v1", "hello", nil))
	if err != nil || res.Output != `{"lines":1,"text":"hello"}` {
		t.Errorf("object output: %+v, %v", res, err)
	}
}

func TestBadToken(t *testing.T) {
	t.Parallel()
	_, _, url := setup(t)
	ex := newExecutor(t, url, "wrong-token")
	_, err := ex.Execute(context.Background(), request("t", "writer", "w_v1", "x", nil))
	if err == nil || !strings.Contains(err.Error(), "refused the bearer token") {
		t.Fatalf("error %v; want the token refused", err)
	}
	if _, err := marketplace.New(marketplace.Config{Endpoint: url}); err == nil {
		t.Error("New without a token: no error")
	}
}

// The marketplace executor passes the executors' conformance suite against
// a real marketplace, whose Claude Code worker runs the fake claude.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker, Postgres and the test images")
	}
	t.Parallel()
	mp := marketplacetest.Start(t, pgtest.DSN(t), marketplacetest.Options{Images: map[string]string{"claude_code_assistant_v1": "meshwork/claude-worker-fake:test"}})
	transport := http.DefaultTransport.(*http.Transport).Clone()
	ex, err := marketplace.New(marketplace.Config{Endpoint: mp.Endpoint, Token: marketplacetest.Token, HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ex.Close()
		transport.CloseIdleConnections()
	})
	executortest.Run(t, executortest.Harness{
		Executor: ex, RoleName: "writer",
		Role: func(string) pipeline.Role {
			return pipeline.Role{Via: pipeline.ViaMarketplace, Worker: "claude_code_assistant_v1"}
		},
	})
}
