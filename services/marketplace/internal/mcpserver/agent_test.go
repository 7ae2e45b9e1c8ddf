package mcpserver_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/fakeclaudelog"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

const fakeAgentImage = "meshwork/claude-worker-fake:test"

// setupAgent is setup with claude_code_assistant_v1 running the test image,
// whose `claude` is the fake, logging each invocation into the workspace.
func setupAgent(t *testing.T, nested bool) *bundle {
	t.Helper()
	return setupAgentWith(t, nested, nil)
}

// setupAgentWith is setupAgent with the catalog's definitions adjusted.
func setupAgentWith(t *testing.T, nested bool, adjust func(*meshtype.Definition)) *bundle {
	t.Helper()
	requireImage(t, fakeAgentImage)
	b := &bundle{
		images:    map[string]string{"claude_code_assistant_v1": fakeAgentImage},
		agentEnv:  []string{"ANTHROPIC_API_KEY=test-key-not-real", fakeclaudelog.Env + "=/workspace/.meshwork/fakeclaude.log"},
		nestedURL: nested,
		egress:    true, // the Claude Code worker is an egress worker
		adjust:    adjust,
	}
	return setupWith(t, b)
}

// fakeInvocations reads the fake claude's log out of a journey's workspace.
func fakeInvocations(t *testing.T, b *bundle, containerID, volume string) []fakeclaudelog.Invocation {
	t.Helper()
	var buf bytes.Buffer
	if err := b.rt.ExportWorkspace(context.Background(), workerruntime.Handle{ID: containerID, Workspace: volume}, &buf); err != nil {
		t.Fatalf("exporting the workspace: %v", err)
	}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatal("no fake claude log in the workspace")
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(h.Name, ".meshwork/fakeclaude.log") {
			continue
		}
		data, _ := io.ReadAll(tr)
		calls, err := fakeclaudelog.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		return calls
	}
}

// The Claude Code worker: two actions share one agent session, which
// survives a marketplace restart; the budget is enforced by the gate.
func TestAgentWorker(t *testing.T) {
	t.Parallel()
	b := setupAgent(t, false)
	cs := b.client(t, aliceToken)
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": "claude_code_assistant_v1", "journey_id": "agent"})

	first := must(t, cs, "execute_in_worker", execArgs("agent", map[string]any{"type": "task", "task": "Summarise the repository"}))
	session, _ := first["session_id"].(string)
	if first["executed"] != true || len(session) != 36 {
		t.Fatalf("first action: %v", first)
	}
	second := must(t, cs, "execute_in_worker", execArgs("agent", map[string]any{"type": "read", "target": "README.md"}))
	if second["session_id"] != session {
		t.Errorf("second action's session %v, want %s", second["session_id"], session)
	}
	st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "agent"})
	if st["session_id"] != session || st["cost_usd"].(float64) <= 0 {
		t.Errorf("state: session %v cost %v", st["session_id"], st["cost_usd"])
	}

	b.start(t) // the session and the cost live in Postgres
	cs = b.client(t, aliceToken)
	third := must(t, cs, "execute_in_worker", execArgs("agent", map[string]any{"type": "task", "task": "And now?"}))
	if third["session_id"] != session {
		t.Errorf("after a restart: session %v, want %s", third["session_id"], session)
	}
	calls := fakeInvocations(t, b, sp["container_id"].(string), sp["workspace"].(string))
	if len(calls) != 3 {
		t.Fatalf("the fake claude ran %d times, want 3: %v", len(calls), calls)
	}
	for i, c := range calls {
		argv := c.Args()
		if !strings.Contains(argv, "-p") || !strings.Contains(argv, "--output-format stream-json") || !strings.Contains(argv, "--verbose") {
			t.Errorf("call %d argv %q", i, argv)
		}
		if resumed := strings.Contains(argv, "--resume "+session); resumed != (i > 0) {
			t.Errorf("call %d: resumed=%v (argv %q)", i, resumed, argv)
		}
		if c.Cwd != "/workspace" || c.EnvHasClaudeCode || c.UID == 0 {
			t.Errorf("call %d ran in %v, CLAUDECODE %v, uid %v", i, c.Cwd, c.EnvHasClaudeCode, c.UID)
		}
	}
	if !strings.Contains(calls[1].Args(), "Read README.md") {
		t.Errorf("the read action was not turned into a task: %v", calls[1].Argv)
	}

	// Over budget: the gate refuses before the agent is called.
	if _, err := b.pool.Exec(context.Background(), "UPDATE journeys SET cost_usd = 2.5 WHERE id = 'agent'"); err != nil {
		t.Fatal(err)
	}
	execs := b.rt.execs.Load()
	res := call(t, cs, "execute_in_worker", execArgs("agent", map[string]any{"type": "task", "task": "spend more"}))
	if !res.isError || !strings.Contains(mustJSON(t, res.out["violations"]), `"constraint_id":"max_cost_usd"`) {
		t.Errorf("over budget: %s", res.text)
	}
	if b.rt.execs.Load() != execs || len(fakeInvocations(t, b, sp["container_id"].(string), sp["workspace"].(string))) != 3 {
		t.Error("the agent was called over budget")
	}
}

// Recursive composition: an agent journey gets a token of its own for the
// marketplace; with it, the nested caller spawns journeys in its own name,
// each with its own container and gate, and sees nothing of its parent's.
//
// With a warm pool, the agent's worker is made before its journey: its
// token is in its environment from the start, and authenticates nobody
// until the spawn that claims the worker makes it the journey's.
func TestNestedJourneysAreConfined(t *testing.T) {
	t.Parallel()
	for _, pooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("pooled=%v", pooled), func(t *testing.T) {
			t.Parallel()
			testNestedJourneysAreConfined(t, pooled)
		})
	}
}

// agentToken is the marketplace token in a worker's MCP config.
func agentToken(t *testing.T, container string) string {
	t.Helper()
	out, err := exec.Command("docker", "inspect", "--format", "{{json .Config.Env}}", container).Output()
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	_ = json.Unmarshal(out, &env)
	var cfg struct {
		MCPServers map[string]struct {
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MESH_EXEC_MCP_CONFIG_JSON="); ok {
			_ = json.Unmarshal([]byte(v), &cfg)
		}
	}
	server, ok := cfg.MCPServers["meshwork"]
	token, _ := strings.CutPrefix(server.Headers["Authorization"], "Bearer ")
	if !ok || !strings.HasSuffix(server.URL, "/mcp") || len(token) < 32 {
		t.Fatalf("the agent got no MCP config: %v", env)
	}
	return token
}

func testNestedJourneysAreConfined(t *testing.T, pooled bool) {
	t.Helper()
	b := setupAgentWith(t, true, func(d *meshtype.Definition) {
		if pooled && d.ID == "claude_code_assistant_v1" {
			d.Pool.Size = 1
		}
	})
	alice := b.client(t, aliceToken)
	must(t, alice, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "private"})
	if pooled {
		if err := b.mgr.FillPools(context.Background()); err != nil {
			t.Fatal(err)
		}
		var member string
		if err := b.pool.QueryRow(context.Background(), `SELECT container_id FROM pool_members`).Scan(&member); err != nil {
			t.Fatal(err)
		}
		// Unclaimed, the member's token is nobody's.
		if code := postMCP(t, b.url, agentToken(t, member), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); code != http.StatusUnauthorized {
			t.Errorf("an unclaimed pool member's token: %d, want 401", code)
		}
	}
	sp := must(t, alice, "spawn_worker", map[string]any{"worker_id": "claude_code_assistant_v1", "journey_id": "agent"})
	if got := sp["pooled"] == true; got != pooled {
		t.Fatalf("the agent's spawn: pooled %v, want %v", got, pooled)
	}
	token := agentToken(t, sp["container_id"].(string))

	agent := b.client(t, token)
	if l := must(t, agent, "list_journeys", map[string]any{}); len(asList(l["journeys"])) != 0 {
		t.Errorf("the agent sees its parent's journeys: %v", l)
	}
	if r := call(t, agent, "get_worker_state", map[string]any{"journey_id": "private"}); !r.isError {
		t.Errorf("the agent reached its parent's journey: %+v", r)
	}
	nested := must(t, agent, "spawn_worker", map[string]any{"worker_id": "filesystem_research_v1", "journey_id": "sub"})
	if nested["container_id"] == sp["container_id"] || nested["workspace"] == sp["workspace"] {
		t.Errorf("the nested journey shares its parent's worker: %v", nested)
	}
	if r := call(t, agent, "execute_in_worker", execArgs("sub", map[string]any{"type": "write", "target": "x.md", "content": "x"})); !r.isError ||
		!strings.Contains(mustJSON(t, r.out["violations"]), `"constraint_id":"readonly"`) {
		t.Errorf("the nested journey's own gate did not apply: %s", r.text)
	}
	if l := must(t, alice, "list_journeys", map[string]any{}); len(asList(l["journeys"])) != 2 {
		t.Errorf("alice lists %v, want only her own two journeys", l)
	}

	// Stopping the parent stops its nested journeys, and its token.
	stopped := must(t, alice, "stop_worker", map[string]any{"journey_id": "agent"})
	if got := toStrings(stopped["nested_stopped"]); len(got) != 1 || got[0] != "alice/agent/sub" {
		t.Errorf("stop_worker of the parent: %v", stopped)
	}
	if out, _ := exec.Command("docker", "ps", "-q", "--filter", "id="+nested["container_id"].(string)).Output(); strings.TrimSpace(string(out)) != "" {
		t.Error("the nested journey's worker still runs after its parent stopped")
	}
	if _, err := agent.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_journeys", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Errorf("the stopped parent's token: %v", err)
	}
	// A spawn that got past the token before it was revoked is refused
	// all the same: the parent is not live.
	var parent uuid.UUID
	if err := b.pool.QueryRow(context.Background(), `SELECT uid FROM journeys WHERE caller = 'alice' AND id = 'agent'`).Scan(&parent); err != nil {
		t.Fatal(err)
	}
	if err := b.store.PutToken(context.Background(), "alice/agent", bearer.Hash(token), &parent); err != nil {
		t.Fatal(err)
	}
	late := b.client(t, token)
	if r := call(t, late, "spawn_worker", map[string]any{"worker_id": "filesystem_research_v1", "journey_id": "late"}); !r.isError || !strings.Contains(r.text, "is not live") {
		t.Errorf("a nested spawn after the parent stopped: %s", r.text)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range asList(v) {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// stop_worker stops an agent in the middle of its task: it does not wait
// for the task (which would run until its action_timeout, 30 minutes here),
// and the task's call ends with an error rather than a result.
func TestStopDuringATask(t *testing.T) {
	t.Parallel()
	b := setupAgent(t, false)
	cs := b.client(t, aliceToken)
	script, _ := json.Marshal(map[string]any{"steps": []any{map[string]any{"text": "working"}, map[string]any{"hang": map[string]any{}}}})
	b64, sum := tarGz(t, []*tar.Header{{Name: ".fake-claude.json", Typeflag: tar.TypeReg}}, map[string]string{".fake-claude.json": string(script)})
	must(t, cs, "spawn_worker", map[string]any{
		"worker_id": "claude_code_assistant_v1", "journey_id": "busy",
		"source": map[string]any{"archive": map[string]any{"tar_gz_base64": b64, "sha256": sum}},
	})
	task := make(chan result, 1)
	go func() {
		task <- call(t, cs, "execute_in_worker", execArgs("busy", map[string]any{"type": "task", "task": "Work on it"}))
	}()
	// The agent is under way once its container runs a claude process.
	deadline := time.Now().Add(time.Minute)
	for {
		st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "busy"})
		if out, err := exec.Command("docker", "top", st["container_id"].(string)).Output(); err == nil && strings.Contains(string(out), "claude") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	stopped := make(chan map[string]any, 1)
	go func() { stopped <- must(t, cs, "stop_worker", map[string]any{"journey_id": "busy"}) }()
	select {
	case s := <-stopped:
		if s["state"] != "stopped" {
			t.Errorf("stop_worker: %v", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("stop_worker waited for the task it stops")
	}
	select {
	case r := <-task:
		if !r.isError {
			t.Errorf("the stopped task returned a result: %+v", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stopped task's call did not end")
	}
}
