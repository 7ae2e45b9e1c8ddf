package api_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

// The server sends package api's types themselves (the engine returns
// them), and takes what a client sends in its own request types: a start
// request built from api's decodes into the engine's with no field unknown.
func TestTheServerTakesWhatClientsSend(t *testing.T) {
	t.Parallel()
	body, _ := json.Marshal(api.StartRequest{Pipeline: "p", Inputs: map[string]any{"task": "x"}, Thread: "t"})
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var got engine.StartRequest
	if err := dec.Decode(&got); err != nil || got.Pipeline != "p" || got.Thread != "t" || got.Inputs["task"] != "x" {
		t.Errorf("a start request: %+v, %v", got, err)
	}
}
