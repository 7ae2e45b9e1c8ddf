package mcpserver_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/mcpinterop"
	"github.com/meshwork/meshwork/pkg/meshapi"
)

// The marketplace over HTTP with a third-party client (mark3labs/mcp-go)
// at the current protocol and the previous one: the tools are listed, a
// Claude Code worker (the fake) is spawned, its task streams progress
// notifications back through execute_in_worker, and an action on a journey
// that does not exist fails with the code not_found.
func TestThirdPartyClientOverHTTP(t *testing.T) {
	t.Parallel()
	b := setupAgent(t, false)
	task := mcpinterop.Call{
		Tool: meshapi.ToolExecuteInWorker, Args: execArgs("interop", map[string]any{"type": "task", "task": "Summarise the repository"}),
		Check: func(t testing.TB, out map[string]any) {
			t.Helper()
			if out["executed"] != true {
				t.Errorf("task: %v", out)
			}
		},
	}
	mcpinterop.Run(t, mcpinterop.Suite{
		Connect: mcpinterop.HTTP(b.url+"/mcp", aliceToken),
		Tools: []string{
			meshapi.ToolListWorkers, meshapi.ToolDescribeWorker, meshapi.ToolSpawnWorker, meshapi.ToolExecuteInWorker, meshapi.ToolGetWorkerState,
			meshapi.ToolListJourneys, meshapi.ToolStopWorker, meshapi.ToolWorkspaceDiff, meshapi.ToolExportWorkspace, meshapi.ToolWorkerLogs,
		},
		Setup:    []mcpinterop.Call{{Tool: meshapi.ToolSpawnWorker, Args: map[string]any{"worker_id": "claude_code_assistant_v1", "journey_id": "interop"}}},
		OK:       mcpinterop.Call{Tool: meshapi.ToolListWorkers},
		Progress: &task,
		Failing:  mcpinterop.Call{Tool: meshapi.ToolExecuteInWorker, Args: execArgs("no-such-journey", map[string]any{"type": "list", "target": "."})},
		Code:     meshapi.CodeNotFound,
	})
}
