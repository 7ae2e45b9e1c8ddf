package mcptools_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/mcpgolden"
)

// The orchestrator's MCP surface, against its golden transcript.
func TestToolsTranscript(t *testing.T) {
	t.Parallel()
	mcpgolden.Tools(t, setup(t).session, "testdata/tools.txtar")
}

// Typical calls, against their golden transcript: the pipelines, a run
// started, read when it ended, its checkpoints, a fork, and a refusal with
// its code.
func TestCallsTranscript(t *testing.T) {
	t.Parallel()
	b := setup(t)
	settle := func(t *testing.T, result map[string]any) {
		t.Helper()
		id, _ := result["id"].(string)
		b.settle(t, id)
	}
	var runID string
	ofRun := func(more ...any) func() map[string]any {
		return func() map[string]any {
			args := map[string]any{"run_id": runID}
			for i := 0; i+1 < len(more); i += 2 {
				args[more[i].(string)] = more[i+1]
			}
			return args
		}
	}
	mcpgolden.Calls(t, b.session, "testdata/calls.txtar", []mcpgolden.Call{
		{Name: "list_pipelines", Tool: "list_pipelines", Args: map[string]any{}},
		{
			Name: "run_pipeline", Tool: "run_pipeline", Args: map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "tidy the README"}},
			Then: func(t *testing.T, result map[string]any) {
				t.Helper()
				runID, _ = result["id"].(string)
				settle(t, result)
			},
		},
		{Name: "get_run", Tool: "get_run", ArgsFrom: ofRun()},
		{Name: "list_checkpoints", Tool: "list_checkpoints", ArgsFrom: ofRun()},
		{Name: "fork_run", Tool: "fork_run", ArgsFrom: ofRun("seq", 1), Then: settle},
		{Name: "run_pipeline-missing-input", Tool: "run_pipeline", Args: map[string]any{"pipeline": "echo", "inputs": map[string]any{}}},
		{Name: "get_run-unknown", Tool: "get_run", Args: map[string]any{"run_id": "00000000-0000-4000-8000-000000000000"}},
		{Name: "cancel_run-ended", Tool: "cancel_run", ArgsFrom: ofRun()},
		{Name: "export_node_workspace-no-source", Tool: "export_node_workspace", ArgsFrom: ofRun("node", "first")},
	})
}
