package gemini

import (
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/fakeagenttest"
)

// TestConformance runs the backend conformance suite with the default
// configuration, the fake gemini (testdata/fakeagents) standing in for the CLI.
func TestConformance(t *testing.T) {
	t.Parallel()
	cli := fakeagenttest.Scripted(fakeagenttest.Binary(t, "gemini"))
	cli.UnknownSession = "4df9d202-a0c2-4ec6-8144-000000000000"
	backendtest.Exercise(t, New(Config{}), cli)
}
