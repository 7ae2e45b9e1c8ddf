package mcpserver_test

import (
	"testing"

	"github.com/meshwork/meshwork/pkg/mcpgolden"
)

// The marketplace's MCP surface, against its golden transcript.
func TestToolsTranscript(t *testing.T) {
	t.Parallel()
	mcpgolden.Tools(t, setup(t).client(t, aliceToken), "testdata/tools.txtar")
}
