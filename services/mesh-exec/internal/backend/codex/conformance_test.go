package codex

import (
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/fakeagenttest"
)

// TestConformance runs the backend conformance suite with the default
// configuration, the fake codex (testdata/fakeagents) standing in for the CLI.
func TestConformance(t *testing.T) {
	t.Parallel()
	cli := fakeagenttest.Scripted(fakeagenttest.Binary(t, "codex"))
	cli.UnknownSession = "0199a213-81c0-7800-8aa1-000000000000"
	backendtest.Exercise(t, New(Config{}), cli)
}
