package claude

import (
	"encoding/json"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Hook events name the tool, not the call: calls of one tool checked out of
// order are paired by the id the hook's answer names.
func TestHookResponsesPairByToolUseID(t *testing.T) {
	t.Parallel()
	p := newParser("/workspace")
	line := func(v any) []backend.Event {
		b, _ := json.Marshal(v)
		return p.Line(b)
	}
	use := func(id, file string) map[string]any {
		return map[string]any{"type": "tool_use", "id": id, "name": "Read", "input": map[string]any{"file_path": file}}
	}
	line(map[string]any{"type": "assistant", "message": map[string]any{"content": []any{use("toolu_a", "/workspace/main.go"), use("toolu_b", "/workspace/.env")}}})
	deny, _ := json.Marshal(map[string]any{"hookSpecificOutput": map[string]any{
		"permissionDecision": "deny", "permissionDecisionReason": "Refused by the Meshwork gate before it ran:\n- denied_paths: no\n(tool_use_id: toolu_b)",
	}})
	// The second call's hook answers first.
	line(map[string]any{"type": "system", "subtype": "hook_response", "hook_name": "PreToolUse:Read", "hook_event": "PreToolUse", "stdout": string(deny), "exit_code": 0})
	line(map[string]any{"type": "system", "subtype": "hook_response", "hook_name": "PreToolUse:Read", "hook_event": "PreToolUse", "stdout": "Meshwork gate: allowed (tool_use_id: toolu_a)\n", "exit_code": 0})
	got := p.Finish(0, "").ToolDecisions
	if len(got) != 2 || got[0].ToolCallID != "toolu_b" || got[0].Allowed || got[0].Summary != "Reading .env" ||
		got[1].ToolCallID != "toolu_a" || !got[1].Allowed || got[1].Summary != "Reading main.go" {
		t.Fatalf("decisions %+v", got)
	}
	if got[0].Violations[0].ConstraintID != "denied_paths" {
		t.Fatalf("violations %+v", got[0].Violations)
	}
}
