package cli_test

import (
	"os"
	"testing"

	"github.com/meshwork/meshwork/pkg/mcpinterop"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/pgtest"
)

// marketplace serve --transport stdio with a third-party client
// (mark3labs/mcp-go) at the current protocol and the previous one: tools
// listed, a worker spawned and an action run, and a refused spawn's code
// read from its structured content.
func TestServeStdioThirdPartyClient(t *testing.T) {
	t.Parallel()
	bin, label := buildMarketplace(t)
	env := append(os.Environ(), "DATABASE_URL="+pgtest.DSN(t))
	mcpinterop.Run(t, mcpinterop.Suite{
		Connect: mcpinterop.Stdio(bin, env, "serve", "--transport", "stdio", "--labels", label),
		Tools:   []string{meshapi.ToolListWorkers, meshapi.ToolSpawnWorker, meshapi.ToolExecuteInWorker, meshapi.ToolStopWorker},
		// Each version's client starts its own marketplace: mode fresh gives
		// it a worker of its own.
		Setup: []mcpinterop.Call{{Tool: meshapi.ToolSpawnWorker, Args: map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "interop", "mode": "fresh"}}},
		OK: mcpinterop.Call{
			Tool: meshapi.ToolExecuteInWorker, Args: map[string]any{"journey_id": "interop", "action": map[string]any{"type": "list", "target": "."}},
			Check: func(t testing.TB, out map[string]any) {
				t.Helper()
				if out["executed"] != true {
					t.Errorf("list: %v", out)
				}
			},
		},
		Failing: mcpinterop.Call{Tool: meshapi.ToolSpawnWorker, Args: map[string]any{"worker_id": "no_such_worker_v1", "journey_id": "interop-2"}},
		Code:    meshapi.CodeNotFound,
	})
}
