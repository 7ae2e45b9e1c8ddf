package server_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/mcpinterop"
	"github.com/meshwork/meshwork/pkg/meshapi"
)

// mesh-exec with a third-party client (mark3labs/mcp-go) at the current
// protocol and the previous one, over HTTP and over stdio: mesh_execute is
// listed, a run of the fake claude succeeds with progress notifications,
// and an unknown session fails with the code not_found.
func TestThirdPartyClient(t *testing.T) {
	t.Parallel()
	suite := func(connect mcpinterop.Connect) mcpinterop.Suite {
		run := mcpinterop.Call{
			Tool: meshapi.ToolMeshExecute, Args: map[string]any{"repository": "r", "task": "write a report"},
			Check: func(t testing.TB, out map[string]any) {
				t.Helper()
				if id, _ := out["session_id"].(string); id == "" {
					t.Errorf("mesh_execute: no session_id in %v", out)
				}
			},
		}
		return mcpinterop.Suite{
			Connect:  connect,
			Tools:    []string{meshapi.ToolMeshExecute},
			OK:       run,
			Progress: &run,
			Failing:  mcpinterop.Call{Tool: meshapi.ToolMeshExecute, Args: map[string]any{"task": "go on", "session_id": "00000000-0000-4000-8000-000000000000"}},
			Code:     meshapi.CodeNotFound,
		}
	}
	steps := map[string]any{"steps": []any{
		map[string]any{"text": "reading"},
		map[string]any{"write": map[string]any{"file_path": "out.md", "content": "# report\n"}},
		map[string]any{"text": "done"},
	}}
	t.Run("http", func(t *testing.T) {
		e := newEnv(t)
		_, url, _ := e.http(t, script(t, steps))
		mcpinterop.Run(t, suite(mcpinterop.HTTP(url+"/mcp", httpToken)))
	})
	t.Run("stdio", func(t *testing.T) {
		e := newEnv(t)
		mcpinterop.Run(t, suite(mcpinterop.Stdio(bins.meshExec, e.environ(script(t, steps)), "serve", "--transport", "stdio")))
	})
}
