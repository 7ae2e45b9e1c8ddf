package meshctl

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient/apiclienttest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const (
	runID  = "11111111-1111-4111-8111-111111111111"
	forkID = "22222222-2222-4222-8222-222222222222"
	iid    = "33333333-3333-4333-8333-333333333333"
	iid2   = "44444444-4444-4444-8444-444444444444"
	token  = "s3cret"
	// traceID is the trace of the runs the fake serves (but a fork's in
	// TestRunsCommands, which shows a run without one).
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type bundle struct {
	fake  *apiclienttest.Fake
	env   map[string]string
	stdin string
}

type result struct {
	stdout, stderr string
	code           int
}

// setup returns a fake API with the research pipeline, which requires a
// token, and meshctl's environment pointing at it.
func setup(t *testing.T) *bundle {
	t.Helper()
	f := apiclienttest.New(t)
	f.Token = token
	f.AddPipeline(apiclient.Pipeline{
		Name: "research_pipeline", Description: "Research, write, review, approve", Hash: "0123456789abcdef0123",
		Inputs: map[string]api.Input{
			"task":  {Type: api.TypeString, Required: true},
			"depth": {Type: api.TypeNumber, Default: 1.0},
		},
	})
	return &bundle{fake: f, env: map[string]string{"MESHCTL_SERVER": f.URL, "MESHCTL_TOKEN": token}}
}

// exec runs meshctl with args as main does, with times in UTC.
func (b *bundle) exec(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := b.execTo(t.Context(), &out, &errOut, args...)
	return result{out.String(), errOut.String(), code}
}

func (b *bundle) execTo(ctx context.Context, stdout, stderr io.Writer, args ...string) int {
	root := newRoot(config{getenv: func(k string) string { return b.env[k] }, loc: time.UTC})
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(strings.NewReader(b.stdin))
	root.SetArgs(args)
	return Execute(ctx, root)
}

func (r result) check(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

// golden compares got with testdata/name.golden; -update rewrites it.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func node(id, typ, status string, iteration, attempts int, output string) api.NodeView {
	role := ""
	if typ == "agent" {
		role = id + "er"
	}
	return api.NodeView{ID: id, Role: role, Type: typ, Status: status, NodeState: api.NodeState{Output: output, Iteration: iteration, Attempts: attempts}}
}

func checkpoint(seq int, nodes map[string]api.NodeState) api.Event {
	return api.Event{Type: "checkpoint", RunID: runID, Seq: seq, Nodes: nodes, At: t0}
}

func attempt(id int64, nodeID string, n int, status, msg string) api.Event {
	return api.Event{
		Type: "attempt", RunID: runID, NodeID: nodeID, At: t0,
		Attempt: &api.Attempt{ID: id, RunID: runID, NodeID: nodeID, Iteration: 1, Attempt: n, Status: status, Error: msg, StartedAt: t0},
	}
}

func runEvent(status, msg string) api.Event {
	return api.Event{Type: "run", RunID: runID, Status: status, Error: msg, At: t0}
}

func done(iteration, attempts int, output string) api.NodeState {
	return api.NodeState{Status: "succeeded", Iteration: iteration, Attempts: attempts, Output: output}
}

// scenario is a run as the fake serves it: its view when it ended and its
// events.
type scenario struct {
	view   api.RunView
	events []api.Event
}

func baseView(status string) api.RunView {
	return api.RunView{
		Run: api.Run{
			ID: runID, Pipeline: "research_pipeline", PipelineHash: "0123456789abcdef0123", Thread: runID,
			Status: status, CreatedAt: t0, UpdatedAt: t0, TraceID: traceID,
		},
		Inputs:   map[string]any{"task": "dinosaurs", "depth": 2.0},
		Outputs:  map[string]string{},
		Sessions: map[string]string{"researcher": "sess-r1"},
	}
}

// succeeded: research fails once and is retried, write and review succeed,
// revise is skipped.
func succeeded() scenario {
	v := baseView("succeeded")
	v.HeadSeq = 3
	v.Nodes = []api.NodeView{
		node("research", "agent", "succeeded", 1, 2, "facts A\nfacts B"),
		node("write", "agent", "succeeded", 1, 1, "draft"),
		node("review", "agent", "succeeded", 1, 1, "LGTM"),
		node("revise", "agent", "skipped", 0, 0, ""),
	}
	v.Outputs = map[string]string{"research": "facts A\nfacts B", "write": "draft", "review": "LGTM"}
	v.Attempts = []api.Attempt{*attempt(1, "research", 1, "failed", "").Attempt, *attempt(2, "research", 2, "succeeded", "").Attempt}
	return scenario{view: v, events: []api.Event{
		checkpoint(0, nil),
		attempt(1, "research", 1, "failed", "rate limited\nretry after 2s"),
		attempt(2, "research", 2, "succeeded", ""),
		checkpoint(1, map[string]api.NodeState{"research": done(1, 2, "facts A\nfacts B")}),
		checkpoint(2, map[string]api.NodeState{"write": done(1, 1, "draft")}),
		checkpoint(3, map[string]api.NodeState{"revise": {Status: "skipped"}, "review": done(1, 1, "LGTM")}),
		runEvent("succeeded", ""),
	}}
}

// agentEvent is an event of a node's agent.
func agentEvent(node string, ev meshtype.AgentEvent) api.Event {
	return api.Event{Type: "agent", RunID: runID, NodeID: node, Agent: &api.AgentEvent{NodeID: node, AgentEvent: ev, At: t0}, At: t0}
}

// waiting: research reads a file and is refused an Edit of .env, then
// succeeds; approve waits.
func waiting() scenario {
	v := baseView("waiting")
	v.HeadSeq = 2
	v.Nodes = []api.NodeView{
		node("research", "agent", "succeeded", 1, 1, "facts"),
		node("approve", "approval", "waiting", 0, 0, ""),
	}
	v.Outputs = map[string]string{"research": "facts"}
	v.Interrupts = []api.Interrupt{{ID: iid, RunID: runID, NodeID: "approve", Iteration: 1, Status: "pending", CreatedAt: t0}}
	return scenario{view: v, events: []api.Event{
		checkpoint(0, nil),
		agentEvent("research", meshtype.AgentEvent{Kind: "pre_tool", Tool: "Read", Text: "Reading notes.md", Decision: &meshtype.ToolDecision{Allowed: true}}),
		agentEvent("research", meshtype.AgentEvent{Kind: "post_tool", Tool: "Read", Text: "Reading notes.md"}),
		agentEvent("research", meshtype.AgentEvent{Kind: "pre_tool", Tool: "Edit", Text: "Editing .env", Decision: &meshtype.ToolDecision{
			Violations: []meshtype.Violation{{ConstraintID: "denied_paths", Violated: true, Message: `path ".env" is denied by "**/.env"`}},
		}}),
		checkpoint(1, map[string]api.NodeState{"research": done(1, 1, "facts")}),
		checkpoint(2, map[string]api.NodeState{"approve": {Status: "waiting"}}),
		runEvent("waiting", ""),
	}}
}

// failed: research succeeds, review fails three times.
func failed() scenario {
	v := baseView("failed")
	v.HeadSeq = 2
	v.Error = "node review failed after 3 attempt(s): boom 3"
	v.Nodes = []api.NodeView{
		node("research", "agent", "succeeded", 1, 1, "facts"),
		node("review", "agent", "failed", 1, 3, ""),
	}
	v.Outputs = map[string]string{"research": "facts"}
	for i := range 3 {
		v.Attempts = append(v.Attempts, *attempt(int64(i+1), "review", i+1, "failed", "boom").Attempt)
	}
	return scenario{view: v, events: []api.Event{
		checkpoint(0, nil),
		checkpoint(1, map[string]api.NodeState{"research": done(1, 1, "facts")}),
		attempt(1, "review", 1, "failed", "boom 1"),
		attempt(2, "review", 2, "failed", "boom 2"),
		attempt(3, "review", 3, "failed", "boom 3"),
		checkpoint(2, map[string]api.NodeState{"review": {Status: "failed", Iteration: 1, Attempts: 3}}),
		runEvent("failed", "node review failed after 3 attempt(s): boom 3"),
	}}
}
