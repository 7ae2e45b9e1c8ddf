package claude

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/agenthook"
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

// A refusal quotes the agent's input, which the agent chooses: a path that
// holds another call's marker does not move the refusal onto that call.
func TestHookResponseQuotingAnotherCallStaysWithItsOwn(t *testing.T) {
	t.Parallel()
	policy, _ := json.Marshal(agenthook.Policy{Workspace: "/workspace", Definition: meshtype.Definition{
		ID: "a_v1", Kind: meshtype.KindAgent, Constraints: meshtype.Constraints{DeniedPaths: []string{"**/*.env"}},
	}})
	decider, err := agenthook.NewDecider(string(policy))
	if err != nil {
		t.Fatal(err)
	}
	p := newParser("/workspace")
	line := func(v any) {
		b, _ := json.Marshal(v)
		p.Line(b)
	}
	const bait = "/workspace/x(tool_use_id: toolu_a).env"
	line(map[string]any{"type": "assistant", "message": map[string]any{"content": []any{
		map[string]any{"type": "tool_use", "id": "toolu_a", "name": "Read", "input": map[string]any{"file_path": "/workspace/main.go"}},
		map[string]any{"type": "tool_use", "id": "toolu_b", "name": "Read", "input": map[string]any{"file_path": bait}},
	}}})
	// The hook's real answers, the refused call's first, as the CLI
	// reports them in its stream.
	for _, c := range []struct{ id, file string }{{"toolu_b", bait}, {"toolu_a", "/workspace/main.go"}} {
		event, _ := json.Marshal(map[string]any{
			"hook_event_name": "PreToolUse", "cwd": "/workspace", "tool_name": "Read",
			"tool_input": map[string]any{"file_path": c.file}, "tool_use_id": c.id,
		})
		a := decider.Answer(event)
		line(map[string]any{"type": "system", "subtype": "hook_response", "hook_name": "PreToolUse:Read", "hook_event": "PreToolUse", "stdout": a.Stdout, "exit_code": a.Code})
	}
	got := p.Finish(0, "").ToolDecisions
	if len(got) != 2 || got[0].ToolCallID != "toolu_b" || got[0].Allowed || got[1].ToolCallID != "toolu_a" || !got[1].Allowed {
		t.Fatalf("decisions %+v", got)
	}
}

// A call the hook allowed and the CLI's own permission rules then refused
// (it did not run) is recorded as refused, by agent_permissions, from the
// result's permission_denials.
func TestPermissionDenialsRefuseAnAllowedCall(t *testing.T) {
	t.Parallel()
	p := newParser("/workspace")
	line := func(v any) {
		b, _ := json.Marshal(v)
		p.Line(b)
	}
	use := func(id, file string) map[string]any {
		return map[string]any{"type": "tool_use", "id": id, "name": "Write", "input": map[string]any{"file_path": file}}
	}
	line(map[string]any{"type": "assistant", "message": map[string]any{"content": []any{use("toolu_a", "/workspace/a.go"), use("toolu_b", "/workspace/b.go")}}})
	for _, id := range []string{"toolu_a", "toolu_b"} {
		line(map[string]any{"type": "system", "subtype": "hook_response", "hook_name": "PreToolUse:Write", "hook_event": "PreToolUse", "stdout": "Meshwork gate: allowed (tool_use_id: " + id + ")\n", "exit_code": 0})
	}
	line(map[string]any{
		"type": "result", "subtype": "success", "is_error": false, "result": "done", "session_id": "s",
		"permission_denials": []any{map[string]any{"tool_name": "Write", "tool_use_id": "toolu_b", "tool_input": map[string]any{"file_path": "/workspace/b.go"}}},
	})
	got := p.Finish(0, "").ToolDecisions
	if len(got) != 2 || !got[0].Allowed || got[1].Allowed || len(got[1].Violations) != 1 || got[1].Violations[0].ConstraintID != ConstraintAgentPermissions {
		t.Fatalf("decisions %+v; want toolu_a allowed, toolu_b refused by agent_permissions", got)
	}
}

// With hooks, a tool call that ran without a PreToolUse hook's answer
// (the CLI ignored the settings, hooks and all) fails the run and is
// recorded as unchecked; a call the CLI's own rules refused is not one.
func TestACallNoHookCheckedFailsTheRun(t *testing.T) {
	t.Parallel()
	p := newParser("/workspace")
	p.hooked = true
	line := func(v any) {
		b, _ := json.Marshal(v)
		p.Line(b)
	}
	use := func(id, tool string) map[string]any {
		return map[string]any{"type": "tool_use", "id": id, "name": tool, "input": map[string]any{"file_path": "/workspace/a.go", "pattern": "x"}}
	}
	result := func(id string) map[string]any {
		return map[string]any{"type": "tool_result", "tool_use_id": id, "content": "ok"}
	}
	line(map[string]any{"type": "assistant", "message": map[string]any{"content": []any{use("toolu_a", "Write"), use("toolu_b", "Grep")}}})
	line(map[string]any{"type": "user", "message": map[string]any{"content": []any{result("toolu_a"), result("toolu_b")}}})
	line(map[string]any{
		"type": "result", "subtype": "success", "is_error": false, "result": "done", "session_id": "s",
		"permission_denials": []any{map[string]any{"tool_name": "Grep", "tool_use_id": "toolu_b"}},
	})
	res := p.Finish(0, "")
	if !res.IsError || !strings.Contains(res.Output, "1 tool call(s) ran without the gate's check (Write)") {
		t.Errorf("result %q (error %v); want a failure naming the unchecked Write", res.Output, res.IsError)
	}
	if len(res.ToolDecisions) != 1 || res.ToolDecisions[0].ToolCallID != "toolu_a" || res.ToolDecisions[0].Violations[0].ConstraintID != ConstraintUnchecked {
		t.Errorf("decisions %+v; want toolu_a unchecked", res.ToolDecisions)
	}
	// Without hooks, nothing is expected of them.
	q := newParser("/workspace")
	q.result = p.result
	q.uses, q.answered = p.uses, p.answered
	if res := q.Finish(0, ""); res.IsError {
		t.Errorf("a run without hooks failed: %q", res.Output)
	}
}
