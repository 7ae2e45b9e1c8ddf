package api_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// The server encodes its own types; clients decode into package api's.
// Every field of a fully set server value must come through: decoded into
// the api type and encoded again, the JSON is the same. A field the server
// gains that api lacks fails here.
func TestWireTypesMatchTheServer(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Minute)
	seq := 3
	run := store.Run{Run: api.Run{
		ID: "r1", Pipeline: "p", PipelineHash: "h", Thread: "th", Caller: "alice", Status: "failed", Error: "boom",
		HeadSeq: 4, ForkedFromRun: "r0", ForkedFromSeq: &seq, CreatedAt: t0, UpdatedAt: t1, FinishedAt: &t1, TraceID: "abc",
	}, Traceparent: "00-abc-def-01", InlineJob: []byte(`{}`)}
	node := pipeline.NodeState{Output: "out", Status: "succeeded", Attempts: 2, Iteration: 1, Patch: "diff"}
	attempt := store.Attempt{
		ID: 7, RunID: "r1", NodeID: "n", Iteration: 1, Attempt: 2, JobID: 9, Replica: "x", Status: "failed",
		Error: "e", SessionID: "s", CostUSD: 0.5, Task: "t", StartedAt: t0, FinishedAt: &t1,
	}
	interrupt := store.Interrupt{
		ID: "i", RunID: "r1", NodeID: "a", Iteration: 1, Status: "resumed", Value: json.RawMessage(`"ok"`),
		DecidedBy: "bob", CreatedAt: t0, ResumedAt: &t1,
	}
	agent := store.AgentEvent{ID: 5, NodeID: "n", At: t1, AgentEvent: meshtype.AgentEvent{
		Kind: "pre_tool", Tool: "Edit", ToolCallID: "tu",
		Text: "Editing", IsError: true, Decision: &meshtype.ToolDecision{
			ToolCallID: "tu", Tool: "Edit", Summary: "s", Allowed: false,
			Violations: []meshtype.Violation{{ConstraintID: "c", Violated: true, Message: "m"}},
		},
	}}
	state := runstate.State{
		Inputs: map[string]any{"task": "x"}, Nodes: map[string]pipeline.NodeState{"n": node},
		Loops: map[string]int{"n": 1}, Sessions: map[string]string{"r": "s"},
	}
	for name, c := range map[string]struct {
		server any
		client any
	}{
		"run": {run, &api.Run{}},
		"run view": {engine.RunView{
			Run: run, Inputs: map[string]any{"task": "x"}, Outputs: map[string]string{"n": "out"}, Sessions: map[string]string{"r": "s"},
			Nodes:      []engine.NodeView{{ID: "n", Role: "r", Type: "agent", Status: "succeeded", Needs: []string{"m"}, Next: "m", NodeState: node}},
			Interrupts: []store.Interrupt{interrupt}, Attempts: []store.Attempt{attempt}, Loops: map[string]int{"n": 1},
			PatchNode: "n", Patch: "diff",
		}, &api.RunView{}},
		"checkpoint": {store.Checkpoint{
			RunID: "r1", Seq: 2, ParentRun: "r0", ParentSeq: &seq, NodeID: "n", Iteration: 1,
			Delta: state, CreatedAt: t0, Bytes: 10,
		}, &api.Checkpoint{}},
		"event": {engine.Event{
			Type: "attempt", RunID: "r1", Seq: 2, NodeID: "n", Nodes: map[string]pipeline.NodeState{"n": node},
			Attempt: &attempt, Agent: &agent, Status: "failed", Error: "e", At: t1,
		}, &api.Event{}},
		"pipeline": {engine.PipelineSummary{Name: "p", Description: "d", Hash: "h", Inputs: map[string]pipeline.Input{
			"task": {Type: pipeline.TypeString, Required: true, Default: "x", Description: "d"},
		}}, &api.PipelineSummary{}},
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
	// The status names are the server's.
	for _, pair := range [][2]string{
		{api.RunRunning, runstate.RunRunning},
		{api.RunWaiting, runstate.RunWaiting},
		{api.RunSucceeded, runstate.RunSucceeded},
		{api.RunFailed, runstate.RunFailed},
		{api.RunCancelled, runstate.RunCancelled},
		{api.StatusPending, pipeline.StatusPending},
		{api.StatusRunning, pipeline.StatusRunning},
		{api.StatusWaiting, pipeline.StatusWaiting},
		{api.StatusSucceeded, pipeline.StatusSucceeded},
		{api.StatusFailed, pipeline.StatusFailed},
		{api.StatusSkipped, pipeline.StatusSkipped},
		{string(api.TypeString), string(pipeline.TypeString)},
		{string(api.TypeNumber), string(pipeline.TypeNumber)},
		{string(api.TypeBoolean), string(pipeline.TypeBoolean)},
		{string(api.TypeObject), string(pipeline.TypeObject)},
		{string(api.TypeRepository), string(pipeline.TypeRepository)},
	} {
		if pair[0] != pair[1] {
			t.Errorf("api says %q, the server %q", pair[0], pair[1])
		}
	}
}
