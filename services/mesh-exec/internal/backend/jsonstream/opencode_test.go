package jsonstream

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

// opencodeSession is the session id of the opencode fixtures (testdata/opencode), which are
// reconstructed from the CLI's documentation and source, not captured; see
// testdata/opencode/README.md.
const opencodeSession = "ses_494719016ffe85dkDMj0FPRbHK"

func TestOpenCodeParserNewSession(t *testing.T) {
	t.Parallel()
	events, res := feed(t, OpenCode(), "opencode/new_session.jsonl", backend.Request{}, 0, "")
	wantKinds := []backend.Kind{
		backend.KindInit,
		backend.KindText,
		backend.KindToolUse, backend.KindToolResult, // read
		backend.KindToolUse, backend.KindToolResult, // edit
		backend.KindToolUse, backend.KindToolResult, // bash, failed
		backend.KindText,
		backend.KindResult,
	}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, wantKinds) {
		t.Fatalf("kinds = %v\nwant %v", got, wantKinds)
	}
	if events[0].SessionID != opencodeSession {
		t.Errorf("init = %+v", events[0])
	}
	if e := events[2]; e.Tool != "read" || e.Text != "calc/add_test.go" {
		t.Errorf("read tool use = %+v", e)
	}
	if e := events[7]; !e.IsError || e.Tool != "bash" || e.Text != "Error: command exited with code 1" {
		t.Errorf("failed bash result = %+v", e)
	}
	if e := events[9]; e.Text != "Fixed Add in calc/add.go: it now returns a + b." {
		t.Errorf("result event = %+v", e)
	}
	want := backend.Result{
		SessionID:     opencodeSession,
		Output:        "Fixed Add in calc/add.go: it now returns a + b.",
		NumTurns:      3,
		InputTokens:   7952 + 8100 + 200,
		OutputTokens:  35 + 60 + 18,
		ToolsUsed:     []string{"read", "edit", "bash"},
		FilesModified: []string{"/workspace/calc/add.go"},
	}
	cost := res.CostUSD
	res.CostUSD = 0
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Finish() =\n%+v\nwant\n%+v", res, want)
	}
	if math.Abs(cost-0.0254) > 1e-9 {
		t.Errorf("CostUSD = %v, want 0.0254", cost)
	}
}

func TestOpenCodeParserOldReleaseWithoutDone(t *testing.T) {
	t.Parallel()
	_, res := feed(t, OpenCode(), "opencode/old_release.jsonl", backend.Request{}, 0, "")
	if res.IsError || res.Output != "OK" || res.SessionID != "ses_6aade4081ffe216ygZUgcUQdR1" || res.InputTokens != 14217 {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestOpenCodeParserError(t *testing.T) {
	t.Parallel()
	events, res := feed(t, OpenCode(), "opencode/error.jsonl", backend.Request{}, 1, "")
	if last := events[len(events)-1]; last.Kind != backend.KindError || last.Text != "Invalid API key" {
		t.Errorf("last event = %+v", last)
	}
	if !res.IsError || res.Output != "Invalid API key" || !errors.Is(res.Err, backend.ErrNotLoggedIn) {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestOpenCodeParserNonZeroExitAfterSteps(t *testing.T) {
	t.Parallel()
	_, res := feed(t, OpenCode(), "opencode/old_release.jsonl", backend.Request{}, 1, "killed\n")
	if !res.IsError || res.Output != "killed" {
		t.Errorf("Finish() = %+v", res)
	}
}
