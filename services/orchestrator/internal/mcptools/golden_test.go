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
