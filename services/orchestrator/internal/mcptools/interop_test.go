package mcptools_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/mcpinterop"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/mcptools"
)

// A third-party client (mark3labs/mcp-go) at the current protocol and at
// the previous one, over HTTP: the orchestrator's tools are listed, a call
// succeeds and a failed call's code is in its structured content. (No
// orchestrator tool sends progress: each answers at once.)
func TestThirdPartyClientOverHTTP(t *testing.T) {
	t.Parallel()
	srv := serveTools(t, mcptools.Config{Engine: enginetest.Start(t).Engine})
	mcpinterop.Run(t, mcpinterop.Suite{
		Connect: mcpinterop.HTTP(srv.URL+"/mcp", carolToken),
		Tools:   []string{"list_pipelines", "run_pipeline", "get_run", "list_runs", "list_checkpoints", "fork_run", "resume_run", "cancel_run", "export_node_workspace"},
		OK: mcpinterop.Call{Tool: "list_pipelines", Check: func(t testing.TB, out map[string]any) {
			t.Helper()
			if p, _ := out["pipelines"].([]any); len(p) == 0 {
				t.Errorf("list_pipelines: %v, want the test pipelines", out)
			}
		}},
		Failing: mcpinterop.Call{Tool: "get_run", Args: map[string]any{"run_id": "00000000-0000-0000-0000-000000000000"}},
		Code:    meshapi.CodeNotFound,
	})
}
