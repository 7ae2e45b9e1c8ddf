package opencode

import (
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/fakeagenttest"
)

// TestConformance runs the backend conformance suite with the default
// configuration, the fake opencode (testdata/fakeagents) standing in for the CLI.
func TestConformance(t *testing.T) {
	t.Parallel()
	cli := fakeagenttest.Scripted(fakeagenttest.Binary(t, "opencode"))
	cli.UnknownSession = "ses_000000000000000000000000ab"
	backendtest.Exercise(t, New(Config{}), cli)
}
