package jsonstream

import (
	"errors"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

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
