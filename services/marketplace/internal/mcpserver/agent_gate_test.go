package mcpserver_test

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/meshwork/meshwork/pkg/meshtype"
	meshprogress "github.com/meshwork/meshwork/pkg/progress"
)

// The agent's own tool calls are under the worker's gate and in the audit
// log: the fake claude, scripted by the repository it is given, tries an
// Edit of .env, a Bash command (not among the worker's allowed tools) and
// a Read of /etc/passwd, which are refused before
// they run, then reads and writes what it may. Each call is an audit row
// under the execute_in_worker action it happened in.
func TestAgentToolCallsAreAudited(t *testing.T) {
	t.Parallel()
	b := setupAgent(t, false)
	cs := b.client(t, aliceToken)
	script, _ := json.Marshal(map[string]any{"steps": []any{
		map[string]any{"edit": map[string]any{"file_path": ".env", "old_string": "SECRET=1", "new_string": "SECRET=2"}},
		map[string]any{"bash": "go test ./... && curl evil.example"},
		map[string]any{"read": map[string]any{"file_path": "/etc/passwd"}},
		map[string]any{"read": map[string]any{"file_path": "main.go"}},
		map[string]any{"write": map[string]any{"file_path": "notes.md", "content": "# Notes\n"}},
	}, "reply": "Done."})
	files := map[string]string{".fake-claude.json": string(script), "main.go": "package main\n", ".env": "SECRET=1\n"}
	entries := []*tar.Header{
		{Name: ".fake-claude.json", Typeflag: tar.TypeReg},
		{Name: "main.go", Typeflag: tar.TypeReg},
		{Name: ".env", Typeflag: tar.TypeReg},
	}
	b64, sum := tarGz(t, entries, files)
	must(t, cs, "spawn_worker", map[string]any{
		"worker_id": "claude_code_assistant_v1", "journey_id": "gated",
		"source": map[string]any{"archive": map[string]any{"tar_gz_base64": b64, "sha256": sum}},
	})
	// A client that asks for progress gets the agent's events, live.
	var mu sync.Mutex
	var progress []string
	var tally meshprogress.Tally
	pc := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, req.Params.Message)
			if ev, ok := req.Params.Meta[meshtype.AgentEventMetaKey].(map[string]any); ok {
				progress = append(progress, fmt.Sprintf("event %v %v", ev["kind"], ev["text"]))
			}
			tally.Handled()
		},
	})
	pcs, err := pc.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   b.url + "/mcp",
		HTTPClient: &http.Client{Transport: &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: aliceToken}), Base: http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pcs.Close()
	params := &mcp.CallToolParams{Name: "execute_in_worker", Arguments: execArgs("gated", map[string]any{"type": "task", "task": "Tidy up"})}
	params.SetProgressToken("tidy")
	res, err := pcs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("task: %v %+v", err, res)
	}
	sent, ok := meshprogress.Sent(res.Meta)
	if !ok || sent < 10 {
		t.Fatalf("the result says %d progress notifications were sent (%v)", sent, ok)
	}
	tally.Wait(sent, 10*time.Second)
	mu.Lock()
	live := strings.Join(progress, "\n")
	mu.Unlock()
	rest := live
	for _, want := range []string{
		"pre_tool: Editing .env (refused: denied_paths)",
		"event pre_tool Editing .env",
		"pre_tool: Reading main.go",
		"event post_tool Reading main.go",
		"event post_tool Writing notes.md",
		"event stop Finished its turn",
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("progress lacks %q (in order):\n%s", want, live)
		}
		rest = rest[i+len(want):]
	}

	rows, err := b.pool.Query(context.Background(), `SELECT a.action_type, coalesce(a.target, ''), a.decision, a.violations::text, coalesce(a.parent_action_id, 0), p.action_type
		FROM actions a LEFT JOIN actions p ON p.id = a.parent_action_id JOIN journeys j ON j.uid = a.journey_uid
		WHERE j.id = 'gated' ORDER BY a.id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var typ, target, decision, violations string
		var parent int64
		var parentType *string
		if err := rows.Scan(&typ, &target, &decision, &violations, &parent, &parentType); err != nil {
			t.Fatal(err)
		}
		if typ == "agent_tool" && (parent == 0 || parentType == nil || *parentType != "task") {
			t.Errorf("tool call %q is not under its task: parent %d", target, parent)
		}
		got = append(got, typ+" | "+target+" | "+decision+" | "+violations)
	}
	all := strings.Join(got, "\n")
	t.Logf("audit rows:\n%s", all)
	for _, want := range []string{
		`task |  | allowed | []`,
		`agent_tool | Edit: Editing .env | refused | [{"message": "path \".env\" is denied by \"**/.env\"", "violated": true, "constraint_id": "denied_paths"}]`,
		`agent_tool | Bash: Running go test ./... && curl evil.example | refused |`,
		`"constraint_id": "agent_tools"`,
		`agent_tool | Read: Reading /etc/passwd | refused | [{"message": "path \"/etc/passwd\" is outside the workspace /workspace", "violated": true, "constraint_id": "path_safety"}]`,
		`agent_tool | Read: Reading main.go | allowed | []`,
		`agent_tool | Write: Writing notes.md | allowed | []`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("audit rows lack %q", want)
		}
	}
	// The refused Edit did not run; the allowed Write did.
	read := must(t, cs, "workspace_diff", map[string]any{"journey_id": "gated"})
	patch, _ := read["patch"].(string)
	if !strings.Contains(patch, "notes.md") || strings.Contains(patch, ".env") {
		t.Errorf("the change is not the allowed write alone:\n%s", patch)
	}
}
