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
