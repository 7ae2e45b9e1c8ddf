package command

import (
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/fakeagenttest"
)

// TestConformance runs the backend conformance suite against an agent
// configured in jsonl mode, the fake's plain agent (testdata/fakeagents)
// playing it. Text mode cannot pass the suite by design: plain text names no
// tool and no modified file, which the suite's EditFile case requires; its
// own tests are in fake_test.go.
func TestConformance(t *testing.T) {
	t.Parallel()
	cfg := jsonlAgent(fakeagenttest.Binary(t, "agent"))
	cfg.SessionNotFoundPattern = `no such session`
	cli := fakeagenttest.Scripted("") // the configured argv runs the fake already
	cli.UnknownSession = "no-such-session"
	backendtest.Exercise(t, New(cfg), cli)
}
