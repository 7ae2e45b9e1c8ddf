package jsonstream

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

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
