package marketplace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/tartest"
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

// The executor's tests run against the real marketplace (its binary, on a
// test database), whose agent workers run the fake agent CLIs in their
// containers: the fake Claude Code replies "ok: <task>" and names a session,
// the fake Codex likewise.
var fakeAgentImages = map[string]string{
	agentWorker:          "meshwork/claude-worker-fake:test",
	"codex_assistant_v1": "meshwork/codex-worker-fake:test",
}

const (
	agentWorker = "claude_code_assistant_v1"
	codexWorker = "codex_assistant_v1"
)

// market is a real marketplace and an executor on it, whose MCP tool calls
// are counted by tool and spawn mode.
type market struct {
	ex       *marketplace.Executor
	calls    *toolCalls
	endpoint string
}

func startMarket(t *testing.T, opts marketplacetest.Options) *market {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Docker, Postgres and the test images")
	}
	if opts.Images == nil {
		opts.Images = fakeAgentImages
	}
	mp := marketplacetest.Start(t, pgtest.DSN(t), opts)
	calls := &toolCalls{n: map[string]int{}}
	return &market{ex: newExecutor(t, mp.Endpoint, marketplacetest.Token, calls), calls: calls, endpoint: mp.Endpoint}
}

// toolCalls counts the MCP tool calls an executor sends, by tool (and
// spawn_worker by mode: "spawn_worker normal"), read from the requests'
// bodies on their way out.
type toolCalls struct {
	mu   sync.Mutex
	n    map[string]int
	next http.RoundTripper
}

func (c *toolCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Method == http.MethodPost {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Mode string `json:"mode"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" {
			c.mu.Lock()
			c.n[msg.Params.Name]++
			if msg.Params.Name == meshapi.ToolSpawnWorker {
				c.n[msg.Params.Name+" "+msg.Params.Arguments.Mode]++
			}
			c.mu.Unlock()
		}
	}
	return c.next.RoundTrip(r)
}

func (c *toolCalls) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func newExecutor(t *testing.T, endpoint, tok string, calls *toolCalls) *marketplace.Executor {
	t.Helper()
	hc := executortest.HTTPClient(t)
	if calls != nil {
		calls.next, hc.Transport = hc.Transport, calls
	}
	ex, err := marketplace.New(marketplace.Config{Endpoint: endpoint, Token: tok, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
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
		if !meshapi.ValidID(id) || len(id) > 89 {
			t.Errorf("%q is not a valid journey id of at most 89 characters", id)
		}
	}
	if _, err := marketplace.JourneyID("-bad role", agentWorker, "t", ""); err == nil {
		t.Error("JourneyID accepted a role that makes an invalid id")
	}
}

// Each journey is spawned once per process, concurrent nodes included; the
// task runs as a task action; the agent's session is reported, and a
// thread's nodes continue it.
func TestSpawnsOnceAndReportsTheSession(t *testing.T) {
	t.Parallel()
	m := startMarket(t, marketplacetest.Options{})
	var mu sync.Mutex
	var reported []string
	onSession := func(id string) { mu.Lock(); reported = append(reported, id); mu.Unlock() }

	threads := []string{"thread-a", "thread-a", "thread-b"}
	var wg sync.WaitGroup
	results := make([]executor.Result, len(threads))
	errs := make([]error, len(threads))
	for i, thread := range threads {
		wg.Go(func() {
			results[i], errs[i] = m.ex.Execute(context.Background(), request(thread, "writer", agentWorker, fmt.Sprintf("task %d", i), onSession))
		})
	}
	wg.Wait()
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if res.Output != fmt.Sprintf("ok: task %d", i) || res.SessionID == "" || res.CostUSD <= 0 {
			t.Errorf("call %d: %+v; want the agent's answer, its session and its cost", i, res)
		}
	}
	if results[0].SessionID != results[1].SessionID || results[0].SessionID == results[2].SessionID {
		t.Errorf("sessions %q, %q, %q: want thread-a's two calls in one session, thread-b's apart", results[0].SessionID, results[1].SessionID, results[2].SessionID)
	}
	// A later node on the thread spawns nothing, and continues its session.
	later, err := m.ex.Execute(context.Background(), request("thread-a", "writer", agentWorker, "later", nil))
	if err != nil || later.SessionID != results[0].SessionID {
		t.Fatalf("later: %+v, %v; want thread-a's session", later, err)
	}
	if n := m.calls.count("spawn_worker normal"); n != 2 || m.calls.count(meshapi.ToolSpawnWorker) != 2 {
		t.Errorf("%d spawns (%d in mode normal); want one per journey", m.calls.count(meshapi.ToolSpawnWorker), n)
	}
	if n := m.calls.count(meshapi.ToolExecuteInWorker); n != 4 {
		t.Errorf("%d executes; want 4", n)
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
	m := startMarket(t, marketplacetest.Options{})
	ctx := context.Background()
	res, err := m.ex.Execute(ctx, request("thread-1", "writer", agentWorker, "node", nil))
	if err != nil {
		t.Fatal(err)
	}
	// The pipeline changed the role's worker: the old journey's session
	// (another worker's) is not continued.
	other, err := m.ex.Execute(ctx, request("thread-1", "writer", codexWorker, "node", nil))
	if err != nil {
		t.Fatal(err)
	}
	if other.SessionID == res.SessionID || other.SessionID == "" {
		t.Errorf("another worker's session %q (the first worker's: %q)", other.SessionID, res.SessionID)
	}
	var wg sync.WaitGroup
	items := make([]executor.Result, 3)
	errs := make([]error, 3)
	for i := range items {
		wg.Go(func() {
			req := request("thread-1", "writer", agentWorker, fmt.Sprintf("item %d", i), nil)
			req.NodeID, req.Item = "each", fmt.Sprintf("each/%d", i)
			items[i], errs[i] = m.ex.Execute(ctx, req)
		})
	}
	wg.Wait()
	sessions := map[string]bool{res.SessionID: true, other.SessionID: true}
	for i, r := range items {
		if errs[i] != nil {
			t.Fatalf("item %d: %v", i, errs[i])
		}
		if r.Output != fmt.Sprintf("ok: item %d", i) {
			t.Errorf("item %d: output %q", i, r.Output)
		}
		sessions[r.SessionID] = true
	}
	if len(sessions) != 5 {
		t.Errorf("sessions %v; want 5 apart (node, other worker, 3 items)", sessions)
	}
	req := request("thread-1", "writer", agentWorker, "item 1 again", nil)
	req.NodeID, req.Item = "each", "each/1"
	if r, err := m.ex.Execute(ctx, req); err != nil || r.SessionID != items[1].SessionID {
		t.Errorf("item 1 again: %+v, %v; want its journey's session %s", r, err, items[1].SessionID)
	}
	if n := m.calls.count(meshapi.ToolSpawnWorker); n != 5 {
		t.Errorf("%d spawns; want one for each of the 5 journeys", n)
	}
}

// A journey stopped between two nodes is resumed with its agent session;
// the task refused as not live runs once more, as it never ran.
func TestResumesStoppedJourney(t *testing.T) {
	t.Parallel()
	m := startMarket(t, marketplacetest.Options{})
	recorded := 0
	req := func(task string) executor.Request {
		r := request("thread-1", "writer", agentWorker, task, nil)
		r.OnWorker = func(string) error { recorded++; return nil }
		return r
	}
	first, err := m.ex.Execute(context.Background(), req("one"))
	if err != nil {
		t.Fatal(err)
	}
	client := mcptest.Connect(t, m.endpoint, marketplacetest.Token, nil)
	stop, err := client.CallTool(context.Background(), &mcp.CallToolParams{Name: meshapi.ToolStopWorker, Arguments: map[string]any{
		"journey_id": journeyID(t, "writer", agentWorker, "thread-1", ""), "workspace": "keep",
	}})
	if err != nil || stop.IsError {
		t.Fatalf("stop_worker: %v %s", err, meshapi.ResultText(stop))
	}
	res, err := m.ex.Execute(context.Background(), req("two"))
	if err != nil || res.Output != "ok: two" || res.SessionID != first.SessionID {
		t.Fatalf("after the journey stopped: %+v, %v; want the answer in session %s", res, err, first.SessionID)
	}
	// Recorded again before it is resumed: the run stops what it started.
	if recorded != 3 {
		t.Errorf("the journey was recorded %d times; want 3 (each use, and its resume)", recorded)
	}
	if m.calls.count("spawn_worker normal") != 1 || m.calls.count("spawn_worker resume") != 1 {
		t.Errorf("spawns: %d normal, %d resume; want one of each", m.calls.count("spawn_worker normal"), m.calls.count("spawn_worker resume"))
	}
	if n := m.calls.count(meshapi.ToolExecuteInWorker); n != 3 {
		t.Errorf("%d executes; want 3 (one refused as not live)", n)
	}
}

// A task the worker's gate refuses is a RefusedError with the violations,
// and no session is reported; a failure in the worker is an error with the
// agent's message, after which the journey is checked again.
func TestFailures(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		m := startMarket(t, marketplacetest.Options{})
		called := false
		_, err := m.ex.Execute(context.Background(), request("t", "writer", agentWorker, strings.Repeat("x", 100_001), func(string) { called = true }))
		var refused *marketplace.RefusedError
		if !errors.As(err, &refused) || len(refused.Violations) == 0 || refused.Violations[0].ConstraintID != "task_size" {
			t.Fatalf("error %v; want a RefusedError with the task_size violation", err)
		}
		if !strings.Contains(err.Error(), "the limit is 100000") || called {
			t.Errorf("error %q (OnSession called: %v)", err, called)
		}
		if !errors.Is(err, executor.ErrRefused) {
			t.Errorf("error %v is not marked refused: the engine would try the refused action again", err)
		}
		if _, err := m.ex.Execute(context.Background(), request("t", "writer", "", "x", nil)); err == nil {
			t.Error("a role without a worker: no error")
		}
	})
	t.Run("a source the marketplace refuses", func(t *testing.T) {
		t.Parallel()
		// The marketplace refuses the spawn; the engine does not try
		// again what would be refused again.
		m := startMarket(t, marketplacetest.Options{})
		req := request("t", "writer", agentWorker, "fine", nil)
		req.Source = &executor.Source{Repository: map[string]any{"git": map[string]any{"url": "https://127.0.0.1:1/nope.git"}}}
		_, err := m.ex.Execute(context.Background(), req)
		if !errors.Is(err, executor.ErrRefused) {
			t.Fatalf("error %v; want the spawn's refusal, marked refused", err)
		}
	})
	t.Run("in the worker", func(t *testing.T) {
		t.Parallel()
		// Without the agent's credential the fake Claude Code fails as
		// the real one does.
		m := startMarket(t, marketplacetest.Options{Env: []string{"ANTHROPIC_API_KEY="}})
		for range 2 {
			_, err := m.ex.Execute(context.Background(), request("t", "writer", agentWorker, "fine", nil))
			if err == nil || !strings.Contains(err.Error(), "Not logged in") {
				t.Fatalf("error %v; want the agent's message", err)
			}
		}
		if n := m.calls.count(meshapi.ToolGetWorkerState); n != 2 {
			t.Errorf("%d state checks; want the journey checked again after the failure", n)
		}
	})
}

// A command node runs as an exec action; its output starts with the exit
// code, then what the command printed, stderr included.
func TestCommandOutput(t *testing.T) {
	t.Parallel()
	m := startMarket(t, marketplacetest.Options{})
	req := request("t", "tester", "shell_v1", "", nil)
	req.Command = []string{"git", "status", "--short"}
	res, err := m.ex.Execute(context.Background(), req)
	if err != nil || res.Output != "exit_code: 0\n" || res.SessionID != "" {
		t.Errorf("git status of a clean workspace: %+v, %v", res, err)
	}
	req.Command = []string{"git", "diff", "no-such-revision"}
	res, err = m.ex.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Output, "exit_code: ") || strings.HasPrefix(res.Output, "exit_code: 0\n") || !strings.Contains(res.Output, "no-such-revision") {
		t.Errorf("output %q; want git's failure, its exit code first", res.Output)
	}
}

func TestBadToken(t *testing.T) {
	t.Parallel()
	m := startMarket(t, marketplacetest.Options{})
	ex := newExecutor(t, m.endpoint, "wrong-token-0123456789", nil)
	_, err := ex.Execute(context.Background(), request("t", "writer", agentWorker, "x", nil))
	if err == nil || !strings.Contains(err.Error(), "refused the bearer token") {
		t.Fatalf("error %v; want the token refused", err)
	}
	if _, err := marketplace.New(marketplace.Config{Endpoint: m.endpoint}); err == nil {
		t.Error("New without a token: no error")
	}
	if _, err := marketplace.New(marketplace.Config{Endpoint: m.endpoint, Token: "a-token-0123456789", Command: []string{"marketplace"}}); err == nil {
		t.Error("New with a command: no error")
	}
}

// The marketplace executor passes the executors' conformance suite against
// a real marketplace, whose Claude Code worker runs the fake claude.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker, Postgres and the test images")
	}
	t.Parallel()
	m := startMarket(t, marketplacetest.Options{})
	executortest.Run(t, executortest.Harness{
		Executor: m.ex, RoleName: "writer",
		Role: func(string) pipeline.Role {
			return pipeline.Role{Via: pipeline.ViaMarketplace, Worker: "claude_code_assistant_v1"}
		},
	})
}

// A node's change carries a binary file in git's binary form, and comes
// with the changed files the patch leaves out (one over 4 MiB); the journey
// is recorded before it is spawned (OnWorker), and Release stops it,
// workspace kept: the next attempt records it again, resumes it and finds
// the change. A journey that is not there is skipped.
func TestPatchOmitsAndRelease(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := gittest.Repo(t, filepath.Join(root, "calc"), map[string]string{"README.md": "calc\n"})
	m := startMarket(t, marketplacetest.Options{Args: []string{"--source-roots", root}})
	var recorded []string
	req := request("t", "tester", "shell_v1", "", nil)
	req.Command = []string{"git", "status", "--short"}
	req.Source = &executor.Source{Repository: map[string]any{"git": map[string]any{"url": repo}}}
	req.OnWorker = func(id string) error {
		recorded = append(recorded, id)
		if m.calls.count(meshapi.ToolSpawnWorker) > 0 && len(recorded) == 1 {
			t.Error("the journey was recorded after its spawn")
		}
		return nil
	}
	if _, err := m.ex.Execute(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(recorded) != 1 || !strings.HasPrefix(recorded[0], "tester-") {
		t.Fatalf("recorded %q; want the journey once", recorded)
	}
	id := recorded[0]
	client := mcptest.Connect(t, m.endpoint, marketplacetest.Token, nil)
	big := strings.Repeat("a line of a large file\n", (4<<20)/23+1)
	for path, content := range map[string]string{"logo.png": "PNG\x00\x01", "NOTES.md": "notes\n", "big.txt": big} {
		res, err := client.CallTool(context.Background(), &mcp.CallToolParams{Name: meshapi.ToolExecuteInWorker, Arguments: map[string]any{
			"journey_id": id, "action": map[string]any{"type": "write", "target": path, "content": content},
		}})
		if err != nil || res.IsError {
			t.Fatalf("write %s: %v %s", path, err, meshapi.ResultText(res))
		}
	}
	res, err := m.ex.Execute(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Patch, "+++ b/NOTES.md") || !strings.Contains(res.Patch, "diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..") ||
		!strings.Contains(res.Patch, "GIT binary patch\nliteral 5\n") || strings.Contains(res.Patch, "big.txt") || !slices.Equal(res.PatchOmits, []string{"big.txt"}) {
		t.Fatalf("patch %q, omits %q; want NOTES.md and logo.png (in binary form) in the patch, and big.txt left out", res.Patch, res.PatchOmits)
	}

	for _, j := range []string{id, "tester-nothing-here"} {
		if err := m.ex.Release(context.Background(), j); err != nil {
			t.Fatalf("Release %s: %v", j, err)
		}
	}
	st, err := client.CallTool(context.Background(), &mcp.CallToolParams{Name: meshapi.ToolGetWorkerState, Arguments: map[string]any{"journey_id": id}})
	if err != nil || !strings.Contains(meshapi.ResultText(st), `"state":"stopped"`) {
		t.Fatalf("after Release: %v %s; want the journey stopped", err, meshapi.ResultText(st))
	}
	// The stopped journey's workspace is taken out whole, the file the
	// patch left out included, with the change the attempt reported.
	if res.Journey != id {
		t.Errorf("the attempt's journey %q, want %q", res.Journey, id)
	}
	ws, err := m.ex.Export(context.Background(), id, "tar")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tartest.Files(t, ws.Content)["big.txt"]; ws.Digest == "" || ws.Digest != res.ChangeDigest || !ok || ws.SHA256 == "" {
		t.Errorf("Export: digest %q (the attempt's %q), big.txt in the tar %v, sha256 %q", ws.Digest, res.ChangeDigest, ok, ws.SHA256)
	}
	if _, err := m.ex.Export(context.Background(), "tester-nothing-here", "tar"); err == nil {
		t.Error("Export of a journey that does not exist: no error")
	} else if me, ok := meshapi.AsError(err); !ok || me.Code != meshapi.CodeNotFound {
		t.Errorf("Export of a journey that does not exist: %v, want the marketplace's not_found", err)
	}
	res, err = m.ex.Execute(context.Background(), req)
	if err != nil || !slices.Equal(res.PatchOmits, []string{"big.txt"}) || !strings.Contains(res.Patch, "NOTES.md") {
		t.Fatalf("after Release, the next attempt: %+v, %v; want the same change", res.PatchOmits, err)
	}
	if len(recorded) != 3 {
		t.Errorf("recorded %d times; want once an attempt", len(recorded))
	}
	if n := m.calls.count("spawn_worker resume"); n != 1 {
		t.Errorf("%d resumes; want the released journey resumed once", n)
	}
	// A later change to the file the patch leaves out leaves the patch as
	// it was, but not the workspace's digest.
	rewrite, err := client.CallTool(context.Background(), &mcp.CallToolParams{Name: meshapi.ToolExecuteInWorker, Arguments: map[string]any{
		"journey_id": id, "action": map[string]any{"type": "write", "target": "big.txt", "content": strings.ToUpper(big)},
	}})
	if err != nil || rewrite.IsError {
		t.Fatalf("rewrite big.txt: %v %s", err, meshapi.ResultText(rewrite))
	}
	if moved, err := m.ex.Export(context.Background(), id, "tar"); err != nil || moved.Digest == res.ChangeDigest {
		t.Errorf("Export after big.txt changed: %v, digest %s, the attempt's %s; want another", err, moved.Digest, res.ChangeDigest)
	}
}
