package jsonstream

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

// codexSession is the session id of the codex fixtures (testdata/codex), which are
// reconstructed from the CLI's documentation and source, not captured; see
// testdata/codex/README.md.
const codexSession = "0199a213-81c0-7800-8aa1-bbab2a035a53"

func TestCodexParserNewSession(t *testing.T) {
	t.Parallel()
	events, res := feed(t, Codex(), "codex/new_session.jsonl", backend.Request{}, 0, "")
	wantKinds := []backend.Kind{
		backend.KindInit,
		backend.KindToolUse, backend.KindToolResult, // go test fails
		backend.KindText,
		backend.KindToolUse, backend.KindToolResult, // file change
		backend.KindToolUse, backend.KindToolResult, // mcp
		backend.KindToolUse, backend.KindToolResult, // go test passes (no item.started)
		backend.KindText,
		backend.KindResult,
	}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, wantKinds) {
		t.Fatalf("kinds = %v\nwant %v", got, wantKinds)
	}
	if events[0].SessionID != codexSession {
		t.Errorf("init session = %q", events[0].SessionID)
	}
	if e := events[2]; !e.IsError || e.Tool != "command_execution" || !strings.Contains(e.Text, "FAIL") {
		t.Errorf("failed command result = %+v", e)
	}
	if e := events[6]; e.Tool != "mcp__docs__search" || e.Text != `{"q":"Add"}` {
		t.Errorf("mcp tool use = %+v", e)
	}
	if e := events[7]; e.IsError || e.Text != "Add returns a+b." {
		t.Errorf("mcp tool result = %+v", e)
	}
	want := backend.Result{
		SessionID:     codexSession,
		Output:        "Fixed Add in add.go and added a test; go test passes.",
		NumTurns:      1,
		InputTokens:   24763,
		OutputTokens:  122,
		ToolsUsed:     []string{"command_execution", "file_change", "mcp__docs__search"},
		FilesModified: []string{"/workspace/calc/add.go", "/workspace/calc/add_test.go"},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Finish() =\n%+v\nwant\n%+v", res, want)
	}
}

func TestCodexParserResumeSucceedsAfterARetriedError(t *testing.T) {
	t.Parallel()
	_, res := feed(t, Codex(), "codex/resume.jsonl", backend.Request{SessionID: codexSession}, 0, "")
	if res.IsError || res.Output != "You asked me to fix Add; that is done." || res.SessionID != codexSession {
		t.Errorf("Finish() = %+v", res)
	}
	if res.CostUSD != 0 {
		t.Errorf("CostUSD = %v, want 0: codex reports no price", res.CostUSD)
	}
}

func TestCodexParserTurnFailed(t *testing.T) {
	t.Parallel()
	events, res := feed(t, Codex(), "codex/turn_failed.jsonl", backend.Request{}, 1, "")
	if last := events[len(events)-1]; last.Kind != backend.KindError || !last.IsError {
		t.Errorf("last event = %+v", last)
	}
	if !res.IsError || !strings.Contains(res.Output, "401 Unauthorized") {
		t.Errorf("Finish() = %+v", res)
	}
	if !errors.Is(res.Err, backend.ErrNotLoggedIn) {
		t.Errorf("Err = %v, want ErrNotLoggedIn", res.Err)
	}
	if res.SessionID != "0199a213-81c0-7800-8aa1-bbab2a035a54" {
		t.Errorf("SessionID = %q", res.SessionID)
	}
}

func TestCodexParserNoTurnEnd(t *testing.T) {
	t.Parallel()
	_, res := feed(t, Codex(), "codex/item_error.jsonl", backend.Request{}, 1, "some stderr")
	if !res.IsError || res.Output != "stream error: unexpected end of stream" {
		t.Errorf("Finish() = %+v", res)
	}
}
