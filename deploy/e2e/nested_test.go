//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/gittest"
)

// nestedWorkers is recursive composition over the stack's network: the
// Claude Code worker (an egress worker, the fake claude scripted by the
// repository it is given) calls spawn_worker and execute_in_worker on the
// marketplace at MESHWORK_NESTED_MCP_URL, as its own nested caller, gets
// the nested worker's answer and writes it into its own workspace; the
// nested journey has its own container, and stopping the parent stops it.
func (s *stack) nestedWorkers(ctx context.Context, t *testing.T) {
	t.Helper()
	mcpCall := func(tool string, args map[string]any, saveAs string) map[string]any {
		return map[string]any{"mcp_call": map[string]any{"server": "meshwork", "tool": tool, "arguments": args, "save_as": saveAs}}
	}
	write := map[string]any{"type": "write", "target": "hello.txt", "content": "hello from the nested worker"}
	read := map[string]any{"type": "read", "target": "hello.txt"}
	script, _ := json.Marshal(map[string]any{"steps": []any{
		mcpCall("spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "child"}, ""),
		mcpCall("execute_in_worker", map[string]any{"journey_id": "child", "action": write}, ""),
		mcpCall("execute_in_worker", map[string]any{"journey_id": "child", "action": read}, "nested-answer.json"),
	}, "reply": "The nested worker answered."})
	gittest.Repo(t, filepath.Join(s.sourcesDir, "nest"), map[string]string{".fake-claude.json": string(script), "README.md": "# nest\n"})

	cs := s.connect(ctx, t, "client")
	parent := "nest-" + uuid.NewString()[:8]
	// The stack keeps a warm pool of one agent worker (compose.e2e.yaml):
	// the parent is its member, whose token for the marketplace the claim
	// made the parent's.
	s.waitPoolReady(ctx, t, "claude_code_assistant_v1")
	if out, isErr := call(ctx, t, cs, "spawn_worker", map[string]any{
		"worker_id": "claude_code_assistant_v1", "journey_id": parent, "source": map[string]any{"git": map[string]any{"url": "/sources/nest"}},
	}); isErr || out["pooled"] != true {
		t.Fatalf("spawn_worker of the agent, from its pool: %v", out)
	}
	if out, isErr := call(ctx, t, cs, "execute_in_worker", map[string]any{"journey_id": parent, "action": map[string]any{"type": "task", "task": "Ask a nested worker"}}); isErr {
		t.Fatalf("execute_in_worker: %v", out)
	}
	diff, isErr := call(ctx, t, cs, "workspace_diff", map[string]any{"journey_id": parent})
	patch, _ := diff["patch"].(string)
	if isErr || !strings.Contains(patch, "+++ b/nested-answer.json") || !strings.Contains(patch, "hello from the nested worker") {
		t.Fatalf("the agent did not write the nested worker's answer into its workspace: %v\n%s", diff, patch)
	}
	children := dockerLines(ctx, "ps", "-q", "--filter", "label=meshwork.test="+s.project, "--filter", "label=meshwork.worker=filesystem_write_v1")
	if len(children) != 1 {
		t.Fatalf("%d nested workers running, want 1", len(children))
	}

	stopped, isErr := call(ctx, t, cs, "stop_worker", map[string]any{"journey_id": parent, "workspace": "delete"})
	if got := fmt.Sprint(stopped["nested_stopped"]); isErr || got != "[client/"+parent+"/child]" {
		t.Fatalf("stop_worker of the parent: %v", stopped)
	}
	if left := dockerLines(ctx, "ps", "-q", "--filter", "id="+children[0]); len(left) != 0 {
		t.Errorf("the nested worker %s still runs after its parent stopped", children[0])
	}
}
