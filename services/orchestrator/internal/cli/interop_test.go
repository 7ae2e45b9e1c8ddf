package cli

import (
	"io"
	"testing"

	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/meshwork/meshwork/pkg/mcpinterop"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
)

// orchestrator mcp over stdio with a third-party client (mark3labs/mcp-go)
// at the current protocol and the previous one: each connection starts the
// command afresh, as a client starting it as a subprocess would.
func TestMCPStdioThirdPartyClient(t *testing.T) {
	t.Parallel()
	eb := enginetest.Start(t)
	dir := pipelinesDir(t)
	connect := func(t testing.TB) transport.Interface {
		t.Helper()
		outR, inW, done := startMCPStdio(eb.DSN, dir)
		t.Cleanup(func() {
			_ = inW.Close()
			<-done
		})
		return transport.NewIO(outR, inW, io.NopCloser(eofReader{}))
	}
	mcpinterop.Run(t, mcpinterop.Suite{
		Connect: connect,
		Tools:   []string{"list_pipelines", "run_pipeline", "get_run", "list_runs"},
		OK:      mcpinterop.Call{Tool: "run_pipeline", Args: map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "x"}}},
		Failing: mcpinterop.Call{Tool: "run_pipeline", Args: map[string]any{"pipeline": "nope"}},
		Code:    meshapi.CodeNotFound,
	})
}

// eofReader is an empty stderr.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
