package server_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/mcpgolden"
)

// mesh-exec's MCP surface, against its golden transcript.
func TestToolsTranscript(t *testing.T) {
	t.Parallel()
	cs, _ := newEnv(t).stdio(t, nil, nil)
	mcpgolden.Tools(t, cs, "testdata/tools.txtar")
}

// Typical calls of mesh_execute, against their golden transcript: a new
// session, its resume, a repository outside the workspace, a session id
// that is not one.
func TestCallsTranscript(t *testing.T) {
	t.Parallel()
	cs, _ := newEnv(t).stdio(t, nil, nil)
	var session string
	mcpgolden.Calls(t, cs, "testdata/calls.txtar", []mcpgolden.Call{
		{
			Name: "mesh_execute", Tool: "mesh_execute", Args: map[string]any{"repository": "notes", "task": "Summarise the notes"},
			Then: func(t *testing.T, result map[string]any) {
				t.Helper()
				session, _ = result["session_id"].(string)
			},
		},
		{Name: "mesh_execute-resume", Tool: "mesh_execute", ArgsFrom: func() map[string]any {
			return map[string]any{"repository": "notes", "task": "And the open questions?", "session_id": session}
		}},
		{Name: "mesh_execute-outside-the-workspace", Tool: "mesh_execute", Args: map[string]any{"repository": "../etc", "task": "x"}},
		{Name: "mesh_execute-bad-session", Tool: "mesh_execute", Args: map[string]any{"repository": "notes", "task": "x", "session_id": "--resume"}},
	})
	if session == "" {
		t.Error("mesh_execute returned no session")
	}
}
