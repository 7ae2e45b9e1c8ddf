package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	dir := t.TempDir()
	for name, f := range enginetest.Pipelines {
		if err := os.WriteFile(filepath.Join(dir, name), f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	connect := func(t testing.TB) transport.Interface {
		t.Helper()
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		cmd := newMCPCommand(slog.New(slog.DiscardHandler), env{"DATABASE_URL": eb.DSN, "ORCHESTRATOR_CALLER": "dana"}.get)
		cmd.SetArgs([]string{"--transport", "stdio", "--pipelines", dir})
		cmd.SetIn(inR)
		cmd.SetOut(outW)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = cmd.ExecuteContext(context.Background())
			_ = outW.Close()
		}()
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
