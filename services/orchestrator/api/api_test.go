package api_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// The server sends package api's types, except a run (store.Run embeds
// api.Run beside its trace context) and a checkpoint (its delta is
// runstate.State). Every field of a fully set value of those two must come
// through: decoded into the api type and encoded again, the JSON is the
// same. A field the server gains that api lacks fails here.
func TestWireTypesMatchTheServer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	seq := 3
	run := store.Run{Run: api.Run{
		ID: "r1", Pipeline: "p", PipelineHash: "h", Thread: "th", Caller: "alice", Status: "failed", Error: "boom",
		HeadSeq: 4, ForkedFromRun: "r0", ForkedFromSeq: &seq, CreatedAt: t0, UpdatedAt: t1, FinishedAt: &t1, TraceID: "abc",
	}, Traceparent: "00-abc-def-01"}
	state := runstate.State{
		Inputs: map[string]any{"task": "x"},
		Nodes:  map[string]pipeline.NodeState{"n": {Output: "out", Status: "succeeded", Attempts: 2, Iteration: 1, Patch: "diff"}},
		Loops:  map[string]int{"n": 1}, Sessions: map[string]string{"r": "s"},
	}
	for name, c := range map[string]struct {
		server any
		client any
	}{
		"run": {run, &api.Run{}},
		"checkpoint": {store.Checkpoint{
			RunID: "r1", Seq: 2, ParentRun: "r0", ParentSeq: &seq, NodeID: "n", Iteration: 1,
			Delta: state, CreatedAt: t0, Bytes: 10,
		}, &api.Checkpoint{}},
	} {
		sent, err := json.Marshal(c.server)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(sent, c.client); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		again, err := json.Marshal(c.client)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		_ = json.Unmarshal(sent, &a)
		_ = json.Unmarshal(again, &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: the server sends\n%s\nthe api type keeps\n%s", name, sent, again)
		}
	}

	// And what a client sends, the server takes with no field unknown.
	body, _ := json.Marshal(api.StartRequest{Pipeline: "p", Inputs: map[string]any{"task": "x"}, Thread: "t"})
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var got engine.StartRequest
	if err := dec.Decode(&got); err != nil || got.Pipeline != "p" || got.Thread != "t" || got.Inputs["task"] != "x" {
		t.Errorf("a start request: %+v, %v", got, err)
	}
}
