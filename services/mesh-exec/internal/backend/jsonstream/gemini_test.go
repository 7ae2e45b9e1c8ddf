package jsonstream

import (
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

func TestGeminiParserResultError(t *testing.T) {
	t.Parallel()
	events, res := feed(t, Gemini(), "gemini/result_error.jsonl", backend.Request{}, 53, "")
	if e := events[len(events)-1]; e.Kind != backend.KindResult || !e.IsError || e.Text != "Reached max session turns for this session." {
		t.Errorf("result event = %+v", e)
	}
	if !res.IsError || res.Output != "Reached max session turns for this session." || res.InputTokens != 450 || res.Err != nil {
		t.Errorf("Finish() = %+v", res)
	}
}
