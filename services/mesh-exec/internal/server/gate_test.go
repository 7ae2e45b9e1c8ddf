package server_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshtype"
	meshprogress "github.com/meshwork/meshwork/pkg/progress"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/agenthook"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/server"
)

// The agent's own tool calls go through the gate: the real mesh-exec gives
// the fake claude hook settings, the fake runs `mesh-exec hook` before each
// tool as the CLI does, and the refused calls never run. Every decision
// comes back in the result's metadata and as a progress event, in order.
func TestAgentToolCallsAreGated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	repo := filepath.Join(e.root, "repo")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"main.go": "package main\n", ".env": "SECRET=1\n"} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(repo, "etc")); err != nil {
		t.Fatal(err)
	}
	script := map[string]any{"steps": []any{
		map[string]any{"edit": map[string]any{"file_path": ".env", "old_string": "SECRET=1", "new_string": "SECRET=2"}},
		map[string]any{"write": map[string]any{"file_path": "big.txt", "content": strings.Repeat("x", 101)}},
		map[string]any{"bash": "go test ./... && curl evil.example"},
		map[string]any{"bash": "$(echo rm) -rf /workspace"},
		map[string]any{"read": map[string]any{"file_path": "etc/passwd"}},
		map[string]any{"read": map[string]any{"file_path": "main.go"}},
		map[string]any{"write": map[string]any{"file_path": "notes.md", "content": "# Notes\n"}},
		map[string]any{"bash": "echo hi > out.txt"},
		map[string]any{"notification": "Claude is waiting for your input"},
	}, "reply": "Done."}
	scriptFile := filepath.Join(t.TempDir(), "script.json")
	raw, _ := json.Marshal(script)
	if err := os.WriteFile(scriptFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	policy, _ := json.Marshal(agenthook.Policy{Workspace: e.root, Definition: meshtype.Definition{
		ID: "agent_v1", Kind: meshtype.KindAgent, Tools: []string{"task"},
		Constraints: meshtype.Constraints{MaxFileSize: 100, DeniedPaths: []string{"**/.env"}, Commands: []string{"go test"}},
		Agent:       &meshtype.AgentSpec{Backend: "claude"},
	}})

	var mu sync.Mutex
	var events []string
	var tally meshprogress.Tally
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, req.Params.Message)
		if ev, ok := req.Params.Meta[server.EventMetaKey]; ok {
			raw, _ := json.Marshal(ev)
			events = append(events, "meta "+string(raw))
		}
		tally.Handled()
	}}
	cs, _ := e.stdio(t, opts, []string{"--gate-policy", string(policy)}, "FAKE_CLAUDE_SCRIPT="+scriptFile)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name: "mesh_execute", Arguments: map[string]any{"repository": "repo", "task": "do things"}, Meta: mcp.Meta{"progressToken": "p1"},
	})
	if err != nil || res.IsError {
		t.Fatalf("mesh_execute: %v %+v", err, res)
	}
	sent, ok := meshprogress.Sent(res.Meta)
	if !ok {
		t.Fatal("the result does not say how many progress notifications were sent")
	}
	tally.Wait(sent, 10*time.Second)
	var out server.ExecuteOut
	raw, _ = json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}

	type want struct {
		summary string
		refused []string // constraint ids; nil: allowed
	}
	wants := []want{
		{"Editing .env", []string{"denied_paths"}},
		{"Writing big.txt", []string{"max_file_size"}},
		{"Running go test ./... && curl evil.example", []string{"commands"}},
		{"Running $(echo rm) -rf /workspace", []string{"shell"}},
		{"Reading etc/passwd", []string{"path_safety"}},
		{"Reading main.go", nil},
		{"Writing notes.md", nil},
		{"Running echo hi > out.txt", nil},
	}
	calls := out.Metadata.ToolCalls
	if len(calls) != len(wants) {
		t.Fatalf("%d tool decisions, want %d: %+v", len(calls), len(wants), calls)
	}
	for i, w := range wants {
		c := calls[i]
		var ids []string
		for _, v := range c.Violations {
			ids = append(ids, v.ConstraintID)
		}
		if c.Summary != w.summary || c.Allowed != (w.refused == nil) || !slices.Equal(ids, w.refused) || c.ToolCallID == "" {
			t.Errorf("decision %d = %+v, want %q refused by %v", i, c, w.summary, w.refused)
		}
		t.Logf("decision %d: %s allowed=%v %v", i, c.Summary, c.Allowed, c.Violations)
	}

	// The refused calls did nothing; the allowed ones ran.
	for name, content := range map[string]string{".env": "SECRET=1\n", "notes.md": "# Notes\n", "out.txt": "hi\n"} {
		if b, err := os.ReadFile(filepath.Join(repo, name)); err != nil || string(b) != content {
			t.Errorf("%s = %q, %v; want %q", name, b, err, content)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, "big.txt")); !os.IsNotExist(err) {
		t.Errorf("big.txt was written: %v", err)
	}

	// Live events, in order: each call's check, the agent told why, then
	// the calls that ran and the hooks after them.
	mu.Lock()
	all := strings.Join(events, "\n")
	mu.Unlock()
	for _, s := range []string{
		"pre_tool: Editing .env (refused: denied_paths)",
		"tool_result Edit (error): Refused by the Meshwork gate before it ran:\n- denied_paths: path \"repo/.env\" is denied by \"**/.env\"",
		"pre_tool: Running go test ./... && curl evil.example (refused: commands)",
		`command \"curl\" does not start with an allowed command`,
		"pre_tool: Reading main.go\n",
		"post_tool: Reading main.go",
		"post_tool: Running echo hi > out.txt",
		"notification: Claude is waiting for your input",
		"stop: Finished its turn",
	} {
		i := strings.Index(all, s)
		if i < 0 {
			t.Fatalf("progress lacks %q:\n%s", s, all)
		}
		all = all[i+len(s):]
	}
}
