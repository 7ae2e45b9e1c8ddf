package runstate_test

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

const roles = "roles: {r: {via: mesh, repository: w}}\n"

// The test graphs, by name.
var graphs = map[string]string{
	// a -> b -> c
	"linear": `name: linear
` + roles + `nodes:
  - {id: a, role: r, task: x}
  - {id: b, role: r, needs: [a]}
  - {id: c, role: r, needs: [b]}
`,
	// a and b join into c.
	"join": `name: join
` + roles + `nodes:
  - {id: a, role: r, task: x}
  - {id: b, role: r, task: y}
  - {id: c, role: r, needs: [a, b]}
`,
	// A diamond: r -> a, b -> c.
	"diamond": `name: diamond
` + roles + `nodes:
  - {id: r, role: r, task: x}
  - {id: a, role: r, needs: [r]}
  - {id: b, role: r, needs: [r]}
  - {id: c, role: r, needs: [a, b]}
`,
	// Root a runs only when inputs.run_a; b needs a; c joins a and a second
	// root d.
	"skip": `name: skip
inputs: {run_a: {type: boolean}}
` + roles + `nodes:
  - {id: a, role: r, task: x, when: "inputs.run_a"}
  - {id: b, role: r, needs: [a]}
  - {id: d, role: r, task: y}
  - {id: c, role: r, needs: [a, d]}
`,
	// plan -> write -> review -> revise, which loops back to write twice at
	// most; done follows revise.
	"loop": `name: loop
` + roles + `nodes:
  - {id: plan, role: r, task: x}
  - {id: write, role: r, needs: [plan]}
  - {id: review, role: r, needs: [write]}
  - {id: revise, role: r, needs: [review], next: write, max_iterations: 2}
  - {id: done, role: r, needs: [revise]}
`,
	// a -> gate (approval) -> b
	"approval": `name: approval
` + roles + `nodes:
  - {id: a, role: r, task: x}
  - {id: gate, type: approval, needs: [a]}
  - {id: b, role: r, needs: [gate]}
`,
}

func load(t *testing.T, name string) *pipeline.Pipeline {
	t.Helper()
	src, ok := graphs[name]
	if !ok {
		t.Fatalf("no test graph %q", name)
	}
	return loadSource(t, src)
}

func loadSource(t *testing.T, src string) *pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.Load(fstest.MapFS{"p.yaml": {Data: []byte(src)}}, "p.yaml")
	if err != nil {
		t.Fatalf("Load:\n%v", err)
	}
	return p
}

func inputs(t *testing.T, p *pipeline.Pipeline, given map[string]any) map[string]any {
	t.Helper()
	in, err := p.CheckInputs(given)
	if err != nil {
		t.Fatalf("CheckInputs: %v", err)
	}
	return in
}

func succeeded(output string, iteration int) pipeline.NodeState {
	return pipeline.NodeState{Output: output, Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: iteration}
}

// checkStep checks that applying the step's delta to prev gives its Next.
func checkStep(t *testing.T, what string, prev runstate.State, step runstate.Step) {
	t.Helper()
	got := prev.Clone()
	got.Apply(step.Delta)
	if !reflect.DeepEqual(got, step.Next) {
		t.Errorf("%s: prev + Delta = %+v, want Next %+v", what, got, step.Next)
	}
}

// wantSchedule checks the scheduled nodes, in any order (Step.Schedule
// promises none), each once.
func wantSchedule(t *testing.T, what string, step runstate.Step, want ...string) {
	t.Helper()
	if !slices.Equal(slices.Sorted(slices.Values(step.Schedule)), slices.Sorted(slices.Values(want))) {
		t.Errorf("%s: Schedule = %v, want %v", what, step.Schedule, want)
	}
}

// completion is a node completed in a test, and the nodes its completion
// must schedule.
type completion struct {
	node      string
	schedules []string
}

// completeInTurn completes the nodes one after the other from prev, each at
// its first iteration and attempt with its id as output, checks what each
// completion schedules, and returns the last step.
func completeInTurn(t *testing.T, p *pipeline.Pipeline, prev runstate.State, turns ...completion) runstate.Step {
	t.Helper()
	var step runstate.Step
	for _, c := range turns {
		step = runstate.Complete(p, prev, c.node, 1, 1, c.node)
		wantSchedule(t, "Complete "+c.node, step, c.schedules...)
		prev = step.Next
	}
	return step
}

func TestStartSchedulesRoots(t *testing.T) {
	t.Parallel()
	p := load(t, "join")
	step := runstate.Start(p, nil)
	wantSchedule(t, "Start", step, "a", "b")
	if step.Status != runstate.RunRunning || step.Error != "" || len(step.Interrupts) != 0 {
		t.Errorf("Start: status %q, error %q, interrupts %v", step.Status, step.Error, step.Interrupts)
	}
	// Scheduled nodes stay pending: nothing about them is stored yet.
	if len(step.Delta.Nodes) != 0 || len(step.Next.Nodes) != 0 {
		t.Errorf("Start stored node states: delta %v, next %v", step.Delta.Nodes, step.Next.Nodes)
	}
	checkStep(t, "Start", runstate.State{}, step)
}

func TestStartRecordsInputs(t *testing.T) {
	t.Parallel()
	p := load(t, "skip")
	in := inputs(t, p, map[string]any{"run_a": true})
	step := runstate.Start(p, in)
	if !reflect.DeepEqual(step.Delta.Inputs, in) || !reflect.DeepEqual(step.Next.Inputs, in) {
		t.Errorf("Start inputs: delta %v, next %v, want %v", step.Delta.Inputs, step.Next.Inputs, in)
	}
	wantSchedule(t, "Start", step, "a", "d")
}

func TestStartSkipsRootWhenFalse(t *testing.T) {
	t.Parallel()
	p := load(t, "skip")
	step := runstate.Start(p, inputs(t, p, map[string]any{"run_a": false}))
	// a is skipped, which makes b ready; c still waits for d.
	wantSchedule(t, "Start", step, "b", "d")
	if got := step.Next.Node("a").Status; got != pipeline.StatusSkipped {
		t.Errorf("a is %q, want skipped", got)
	}
	if got := step.Delta.Nodes["a"].Status; got != pipeline.StatusSkipped {
		t.Errorf("the delta has a %q, want skipped", got)
	}
	if _, ok := step.Delta.Nodes["b"]; ok {
		t.Error("the delta stores b, which was only scheduled")
	}
	if step.Status != runstate.RunRunning {
		t.Errorf("status %q", step.Status)
	}
	checkStep(t, "Start", runstate.State{}, step)
}

func TestCompleteLinearSchedulesSuccessor(t *testing.T) {
	t.Parallel()
	p := load(t, "linear")
	start := runstate.Start(p, nil)
	wantSchedule(t, "Start", start, "a")

	step := runstate.Complete(p, start.Next, "a", 1, 2, "out a")
	wantSchedule(t, "Complete a", step, "b")
	want := pipeline.NodeState{Output: "out a", Status: pipeline.StatusSucceeded, Attempts: 2, Iteration: 1}
	if got := step.Next.Node("a"); !reflect.DeepEqual(got, want) {
		t.Errorf("a = %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(step.Delta, runstate.State{Nodes: map[string]pipeline.NodeState{"a": want}}) {
		t.Errorf("delta %+v, want only a", step.Delta)
	}
	if step.Status != runstate.RunRunning {
		t.Errorf("status %q", step.Status)
	}
	checkStep(t, "Complete a", start.Next, step)

	last := completeInTurn(t, p, step.Next, completion{"b", []string{"c"}}, completion{"c", nil})
	if last.Status != runstate.RunSucceeded {
		t.Errorf("after the last node: status %q, want succeeded", last.Status)
	}
}

func TestJoinScheduledOnceBothDone(t *testing.T) {
	t.Parallel()
	p := load(t, "join")
	start := runstate.Start(p, nil)
	for _, order := range [][2]string{{"a", "b"}, {"b", "a"}} {
		first := runstate.Complete(p, start.Next, order[0], 1, 1, "x")
		wantSchedule(t, "first completion "+order[0], first)
		if first.Status != runstate.RunRunning {
			t.Errorf("after %s: status %q", order[0], first.Status)
		}
		second := runstate.Complete(p, first.Next, order[1], 1, 1, "y")
		wantSchedule(t, "second completion "+order[1], second, "c")
		checkStep(t, "second completion", first.Next, second)
	}
}

func TestDiamondJoinScheduledOnce(t *testing.T) {
	t.Parallel()
	p := load(t, "diamond")
	start := runstate.Start(p, nil)
	c := completeInTurn(t, p, start.Next,
		completion{"r", []string{"a", "b"}}, completion{"a", nil}, completion{"b", []string{"c"}}, completion{"c", nil})
	if c.Status != runstate.RunSucceeded {
		t.Errorf("status %q", c.Status)
	}
}

func TestSkippedNeedCountsAsDone(t *testing.T) {
	t.Parallel()
	p := load(t, "skip")
	start := runstate.Start(p, inputs(t, p, map[string]any{"run_a": false}))
	// c needs a (skipped) and d (scheduled): not ready yet.
	wantSchedule(t, "Start", start, "b", "d")
	c := completeInTurn(t, p, start.Next, completion{"b", nil}, completion{"d", []string{"c"}}, completion{"c", nil})
	if c.Status != runstate.RunSucceeded {
		t.Errorf("status %q, want succeeded with a skipped node", c.Status)
	}
}

func TestWhenSeesPreviousOutputs(t *testing.T) {
	t.Parallel()
	p := loadSource(t, `name: w
`+roles+`nodes:
  - {id: a, role: r, task: x}
  - {id: b, role: r, needs: [a], when: "nodes.a.output.contains('go')"}
  - {id: c, role: r, needs: [b]}
`)
	start := runstate.Start(p, nil)
	yes := runstate.Complete(p, start.Next, "a", 1, 1, "go on")
	wantSchedule(t, "when true", yes, "b")
	no := runstate.Complete(p, start.Next, "a", 1, 1, "stop")
	// b is skipped in the same step, which makes c ready.
	wantSchedule(t, "when false", no, "c")
	if got := no.Delta.Nodes["b"].Status; got != pipeline.StatusSkipped {
		t.Errorf("b in the delta is %q, want skipped", got)
	}
	checkStep(t, "when false", start.Next, no)
}

func TestWhenErrorFailsRun(t *testing.T) {
	t.Parallel()
	// The index is dynamic, so Load cannot check it: it fails at run time.
	p := loadSource(t, `name: w
inputs: {k: {type: string}}
`+roles+`nodes:
  - {id: a, role: r, task: x}
  - {id: b, role: r, needs: [a], when: "inputs[nodes.a.output] == 'x'"}
`)
	start := runstate.Start(p, inputs(t, p, nil))
	step := runstate.Complete(p, start.Next, "a", 1, 1, "missing")
	if step.Status != runstate.RunFailed || !strings.Contains(step.Error, "node b failed") || !strings.Contains(step.Error, "when:") {
		t.Errorf("status %q, error %q: want failed at b's when", step.Status, step.Error)
	}
	wantSchedule(t, "when error", step)
	if got := step.Next.Node("b").Status; got != pipeline.StatusFailed {
		t.Errorf("b is %q, want failed", got)
	}
	if got := step.Delta.Nodes["a"]; got.Status != pipeline.StatusSucceeded || got.Output != "missing" {
		t.Errorf("the delta lost a's result: %+v", got)
	}
	checkStep(t, "when error", start.Next, step)
}

func TestNextLoop(t *testing.T) {
	t.Parallel()
	p := load(t, "loop")
	st := runstate.Start(p, nil)
	wantSchedule(t, "Start", st, "plan")
	st = runstate.Complete(p, st.Next, "plan", 1, 1, "plan")
	for loop := 1; loop <= 2; loop++ {
		it := loop // each node's iteration in this round
		wantSchedule(t, "before write", st, "write")
		for _, id := range []string{"write", "review"} {
			st = runstate.Complete(p, st.Next, id, it, 1, id+" "+string(rune('0'+it)))
		}
		wantSchedule(t, "after review", st, "revise")
		prev := st.Next
		st = runstate.Complete(p, prev, "revise", it, 3, "revise")
		checkStep(t, "revise", prev, st)

		// The loop is followed: write and what needs it are pending again,
		// with their outputs and iterations kept and attempts reset.
		wantSchedule(t, "revise loops", st, "write")
		if st.Next.Loops["revise"] != loop || st.Delta.Loops["revise"] != loop {
			t.Fatalf("loop %d: Loops next %v, delta %v", loop, st.Next.Loops, st.Delta.Loops)
		}
		for _, id := range []string{"write", "review", "revise"} {
			ns := st.Next.Node(id)
			if ns.Status != pipeline.StatusPending || ns.Iteration != it || ns.Attempts != 0 {
				t.Errorf("loop %d: %s = %+v, want pending at iteration %d with attempts 0", loop, id, ns, it)
			}
			if !reflect.DeepEqual(st.Delta.Nodes[id], ns) {
				t.Errorf("loop %d: the delta has %s = %+v, want %+v", loop, id, st.Delta.Nodes[id], ns)
			}
		}
		if got := st.Next.Node("write").Output; got != "write "+string(rune('0'+it)) {
			t.Errorf("loop %d: write's output %q was not kept", loop, got)
		}
		if got := st.Next.Node("revise").Output; got != "revise" {
			t.Errorf("loop %d: revise's output %q was not kept", loop, got)
		}
		if got := st.Next.Node("plan"); !reflect.DeepEqual(got, succeeded("plan", 1)) {
			t.Errorf("loop %d: plan, outside the loop, is %+v", loop, got)
		}
		if got := st.Next.Node("done").Status; got != pipeline.StatusPending {
			t.Errorf("loop %d: done is %q", loop, got)
		}
		if st.Status != runstate.RunRunning {
			t.Errorf("loop %d: status %q", loop, st.Status)
		}
	}
	// Third round: Loops is at max_iterations, so next is not followed.
	for _, id := range []string{"write", "review"} {
		st = runstate.Complete(p, st.Next, id, 3, 1, id)
	}
	st = runstate.Complete(p, st.Next, "revise", 3, 1, "final")
	wantSchedule(t, "revise at max_iterations", st, "done")
	if st.Next.Loops["revise"] != 2 || len(st.Delta.Loops) != 0 {
		t.Errorf("at max_iterations: Loops next %v, delta %v", st.Next.Loops, st.Delta.Loops)
	}
	if got := st.Next.Node("write"); got.Status != pipeline.StatusSucceeded || got.Iteration != 3 {
		t.Errorf("write was reset past max_iterations: %+v", got)
	}
	st = runstate.Complete(p, st.Next, "done", 1, 1, "done")
	if st.Status != runstate.RunSucceeded {
		t.Errorf("final status %q", st.Status)
	}
}

// A node whose next is itself runs again: next may name "the node itself"
// (pipeline.Node.Next).
func TestNextSelfLoopSchedulesNodeAgain(t *testing.T) {
	t.Parallel()
	p := loadSource(t, `name: self
`+roles+`nodes:
  - {id: a, role: r, task: x, next: a, max_iterations: 2}
`)
	start := runstate.Start(p, nil)
	wantSchedule(t, "Start", start, "a")
	step := runstate.Complete(p, start.Next, "a", 1, 1, "one")
	if step.Next.Loops["a"] != 1 || step.Next.Node("a").Status != pipeline.StatusPending {
		t.Fatalf("the loop was not followed: %+v", step.Next)
	}
	// a is pending and ready again, so its second iteration must get a job;
	// otherwise the run stays "running" with nothing to run.
	wantSchedule(t, "self loop", step, "a")
}

func TestApproval(t *testing.T) {
	t.Parallel()
	p := load(t, "approval")
	start := runstate.Start(p, nil)
	a := runstate.Complete(p, start.Next, "a", 1, 1, "draft")
	wantSchedule(t, "Complete a", a)
	if !slices.Equal(a.Interrupts, []string{"gate"}) {
		t.Errorf("Interrupts = %v, want [gate]", a.Interrupts)
	}
	if got := a.Next.Node("gate").Status; got != pipeline.StatusWaiting {
		t.Errorf("gate is %q, want waiting", got)
	}
	if got := a.Delta.Nodes["gate"].Status; got != pipeline.StatusWaiting {
		t.Errorf("the delta has gate %q, want waiting", got)
	}
	if a.Status != runstate.RunWaiting {
		t.Errorf("status %q, want waiting", a.Status)
	}
	if got := runstate.Status(p, a.Next); got != runstate.RunWaiting {
		t.Errorf("Status = %q, want waiting", got)
	}
	checkStep(t, "Complete a", start.Next, a)

	ok := runstate.Approve(p, a.Next, "gate", "yes")
	wantSchedule(t, "Approve", ok, "b")
	want := pipeline.NodeState{Output: "yes", Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: 1}
	if got := ok.Next.Node("gate"); !reflect.DeepEqual(got, want) {
		t.Errorf("gate = %+v, want %+v", got, want)
	}
	if ok.Status != runstate.RunRunning || len(ok.Interrupts) != 0 {
		t.Errorf("after Approve: status %q, interrupts %v", ok.Status, ok.Interrupts)
	}
	checkStep(t, "Approve", a.Next, ok)
}

func TestFail(t *testing.T) {
	t.Parallel()
	p := load(t, "join")
	start := runstate.Start(p, nil)
	step := runstate.Fail(start.Next, "b", 1, 3, "partial", "boom")
	if step.Status != runstate.RunFailed {
		t.Errorf("status %q", step.Status)
	}
	if want := "node b failed after 3 attempt(s): boom"; step.Error != want {
		t.Errorf("error %q, want %q", step.Error, want)
	}
	want := pipeline.NodeState{Output: "partial", Status: pipeline.StatusFailed, Attempts: 3, Iteration: 1}
	if !reflect.DeepEqual(step.Delta, runstate.State{Nodes: map[string]pipeline.NodeState{"b": want}}) {
		t.Errorf("delta %+v", step.Delta)
	}
	if len(step.Schedule) != 0 || len(step.Interrupts) != 0 {
		t.Errorf("a failure schedules %v, interrupts %v", step.Schedule, step.Interrupts)
	}
	// a is still ready (pending), but the run failed.
	if got := runstate.Status(p, step.Next); got != runstate.RunFailed {
		t.Errorf("Status = %q, want failed", got)
	}
	checkStep(t, "Fail", start.Next, step)
}

func TestFork(t *testing.T) {
	t.Parallel()
	t.Run("empty state schedules roots", func(t *testing.T) {
		t.Parallel()
		p := load(t, "join")
		step := runstate.Fork(p, runstate.State{}, runstate.State{})
		wantSchedule(t, "Fork", step, "a", "b")
		if !step.Delta.IsEmpty() || step.Status != runstate.RunRunning {
			t.Errorf("delta %+v, status %q", step.Delta, step.Status)
		}
	})
	t.Run("every ready node", func(t *testing.T) {
		t.Parallel()
		p := load(t, "join")
		// a done, b running (pending): the fork runs b again, not a.
		at := runstate.State{Nodes: map[string]pipeline.NodeState{"a": succeeded("a", 1)}}
		step := runstate.Fork(p, at, runstate.State{})
		wantSchedule(t, "Fork", step, "b")
	})
	t.Run("patch", func(t *testing.T) {
		t.Parallel()
		p := load(t, "linear")
		at := runstate.State{
			Inputs: map[string]any{},
			Nodes:  map[string]pipeline.NodeState{"a": succeeded("a", 1), "b": succeeded("b", 1), "c": succeeded("c", 1)},
		}
		orig := at.Clone()
		if runstate.Status(p, at) != runstate.RunSucceeded {
			t.Fatalf("the source is %q", runstate.Status(p, at))
		}
		newInputs := map[string]any{"topic": "new"}
		patch := runstate.State{Inputs: newInputs, Nodes: map[string]pipeline.NodeState{"b": {Output: "b", Status: pipeline.StatusPending, Iteration: 1}}}
		step := runstate.Fork(p, at, patch)
		wantSchedule(t, "Fork", step, "b")
		if !reflect.DeepEqual(step.Next.Inputs, newInputs) {
			t.Errorf("inputs %v, want %v", step.Next.Inputs, newInputs)
		}
		if got := step.Next.Node("b").Status; got != pipeline.StatusPending {
			t.Errorf("b is %q", got)
		}
		if got := step.Next.Node("c"); !reflect.DeepEqual(got, succeeded("c", 1)) {
			t.Errorf("c = %+v", got)
		}
		if !reflect.DeepEqual(step.Delta, patch) {
			t.Errorf("delta %+v, want the patch %+v", step.Delta, patch)
		}
		if !reflect.DeepEqual(at, orig) {
			t.Errorf("Fork modified the state it forks from: %+v", at)
		}
		checkStep(t, "Fork", at, step)
	})
	t.Run("patched inputs decide when", func(t *testing.T) {
		t.Parallel()
		p := load(t, "skip")
		at := runstate.Start(p, inputs(t, p, map[string]any{"run_a": true})).Next
		patch := runstate.State{Inputs: inputs(t, p, map[string]any{"run_a": false})}
		step := runstate.Fork(p, at, patch)
		wantSchedule(t, "Fork", step, "b", "d")
		if got := step.Delta.Nodes["a"].Status; got != pipeline.StatusSkipped {
			t.Errorf("a in the delta is %q, want skipped", got)
		}
		checkStep(t, "Fork", at, step)
	})
}

func TestResume(t *testing.T) {
	t.Parallel()
	p := load(t, "join")
	at := runstate.State{Nodes: map[string]pipeline.NodeState{"a": succeeded("a", 1)}}
	step := runstate.Resume(p, at)
	wantSchedule(t, "Resume", step, "b")
	if !step.Delta.IsEmpty() {
		t.Errorf("Resume changed the state: %+v", step.Delta)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	pJoin, pApproval := load(t, "join"), load(t, "approval")
	ok := func(id string) pipeline.NodeState { return succeeded(id, 1) }
	st := func(status string) pipeline.NodeState { return pipeline.NodeState{Status: status, Iteration: 1} }
	tests := []struct {
		name  string
		p     *pipeline.Pipeline
		nodes map[string]pipeline.NodeState
		want  string
	}{
		{"nothing ran: roots ready", pJoin, nil, runstate.RunRunning},
		{"one root done", pJoin, map[string]pipeline.NodeState{"a": ok("a")}, runstate.RunRunning},
		{"join ready", pJoin, map[string]pipeline.NodeState{"a": ok("a"), "b": ok("b")}, runstate.RunRunning},
		{"all done", pJoin, map[string]pipeline.NodeState{"a": ok("a"), "b": ok("b"), "c": ok("c")}, runstate.RunSucceeded},
		{"skipped count as done", pJoin, map[string]pipeline.NodeState{"a": st(pipeline.StatusSkipped), "b": ok("b"), "c": st(pipeline.StatusSkipped)}, runstate.RunSucceeded},
		{"failed with a ready node", pJoin, map[string]pipeline.NodeState{"a": st(pipeline.StatusFailed)}, runstate.RunFailed},
		{"failed and done", pJoin, map[string]pipeline.NodeState{"a": ok("a"), "b": ok("b"), "c": st(pipeline.StatusFailed)}, runstate.RunFailed},
		{"approval waits", pApproval, map[string]pipeline.NodeState{"a": ok("a"), "gate": st(pipeline.StatusWaiting)}, runstate.RunWaiting},
		{"approved", pApproval, map[string]pipeline.NodeState{"a": ok("a"), "gate": ok("gate")}, runstate.RunRunning},
		{"failed beats waiting", pApproval, map[string]pipeline.NodeState{"a": st(pipeline.StatusFailed), "gate": st(pipeline.StatusWaiting)}, runstate.RunFailed},
	}
	for _, tt := range tests {
		// Map order varies: ask a few times.
		for range 20 {
			if got := runstate.Status(tt.p, runstate.State{Nodes: tt.nodes}); got != tt.want {
				t.Errorf("%s: Status = %q, want %q", tt.name, got, tt.want)
				break
			}
		}
	}
}

func TestStateApply(t *testing.T) {
	t.Parallel()
	s := runstate.State{
		Inputs:   map[string]any{"x": 1.0},
		Nodes:    map[string]pipeline.NodeState{"a": {Output: "old", Status: pipeline.StatusSucceeded, Attempts: 2, Iteration: 3}, "b": succeeded("b", 1)},
		Loops:    map[string]int{"a": 1},
		Sessions: map[string]string{"r": "s1"},
	}
	d := runstate.State{
		Nodes:    map[string]pipeline.NodeState{"a": {Status: pipeline.StatusPending}, "c": succeeded("c", 1)},
		Loops:    map[string]int{"b": 2},
		Sessions: map[string]string{"q": "s2"},
	}
	s.Apply(d)
	want := runstate.State{
		Inputs: map[string]any{"x": 1.0}, // a delta without inputs keeps them
		// a is replaced whole: its output, attempts and iteration are not
		// merged from the old entry.
		Nodes:    map[string]pipeline.NodeState{"a": {Status: pipeline.StatusPending}, "b": succeeded("b", 1), "c": succeeded("c", 1)},
		Loops:    map[string]int{"a": 1, "b": 2},
		Sessions: map[string]string{"r": "s1", "q": "s2"},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Apply = %+v\nwant %+v", s, want)
	}

	// Inputs are replaced as a whole, and copied.
	in := map[string]any{"y": "z"}
	s.Apply(runstate.State{Inputs: in})
	in["y"] = "changed"
	if !reflect.DeepEqual(s.Inputs, map[string]any{"y": "z"}) {
		t.Errorf("inputs %v, want only y=z, not aliased", s.Inputs)
	}

	// Applying onto an empty state does not alias the delta's maps.
	var e runstate.State
	e.Apply(d)
	d.Nodes["a"] = succeeded("changed", 9)
	d.Loops["b"] = 9
	d.Sessions["q"] = "changed"
	if e.Nodes["a"].Status != pipeline.StatusPending || e.Loops["b"] != 2 || e.Sessions["q"] != "s2" {
		t.Errorf("Apply aliases the delta's maps: %+v", e)
	}

	// An empty delta changes nothing.
	before := s.Clone()
	s.Apply(runstate.State{})
	if !reflect.DeepEqual(s, before) {
		t.Errorf("an empty delta changed %+v to %+v", before, s)
	}
}

func TestStateClone(t *testing.T) {
	t.Parallel()
	s := runstate.State{
		Inputs:   map[string]any{"x": "1"},
		Nodes:    map[string]pipeline.NodeState{"a": succeeded("a", 1)},
		Loops:    map[string]int{"a": 1},
		Sessions: map[string]string{"r": "s"},
	}
	c := s.Clone()
	if !reflect.DeepEqual(c, s) {
		t.Fatalf("Clone = %+v, want %+v", c, s)
	}
	c.Inputs["x"] = "2"
	c.Nodes["a"] = succeeded("b", 2)
	c.Nodes["new"] = succeeded("n", 1)
	c.Loops["a"] = 5
	c.Sessions["r"] = "other"
	want := runstate.State{
		Inputs:   map[string]any{"x": "1"},
		Nodes:    map[string]pipeline.NodeState{"a": succeeded("a", 1)},
		Loops:    map[string]int{"a": 1},
		Sessions: map[string]string{"r": "s"},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("changing the clone changed the original: %+v", s)
	}
	// Transitions do not modify the state they start from.
	p := load(t, "linear")
	prev := runstate.State{Nodes: map[string]pipeline.NodeState{}}
	runstate.Complete(p, prev, "a", 1, 1, "a")
	runstate.Fail(prev, "a", 1, 1, "", "x")
	if len(prev.Nodes) != 0 {
		t.Errorf("a transition modified its input: %+v", prev.Nodes)
	}
}

func TestStateHelpers(t *testing.T) {
	t.Parallel()
	if !(runstate.State{}).IsEmpty() {
		t.Error("the zero State is not empty")
	}
	for _, s := range []runstate.State{
		{Inputs: map[string]any{}},
		{Nodes: map[string]pipeline.NodeState{"a": {}}},
		{Loops: map[string]int{"a": 1}},
		runstate.SetSession("r", "s"),
	} {
		if s.IsEmpty() {
			t.Errorf("%+v is empty", s)
		}
	}
	if got := runstate.SetSession("r", "s"); !reflect.DeepEqual(got, runstate.State{Sessions: map[string]string{"r": "s"}}) {
		t.Errorf("SetSession = %+v", got)
	}
	s := runstate.State{Inputs: map[string]any{"k": "v"}, Nodes: map[string]pipeline.NodeState{"a": succeeded("a", 1)}}
	if got := s.Node("missing"); !reflect.DeepEqual(got, pipeline.NodeState{Status: pipeline.StatusPending}) {
		t.Errorf("Node(missing) = %+v, want pending", got)
	}
	if got := s.Node("a"); !reflect.DeepEqual(got, succeeded("a", 1)) {
		t.Errorf("Node(a) = %+v", got)
	}
	ps := s.Pipeline()
	if !reflect.DeepEqual(ps.Inputs, s.Inputs) || !reflect.DeepEqual(ps.Nodes, s.Nodes) {
		t.Errorf("Pipeline() = %+v", ps)
	}
}

// drive runs p to its end, completing scheduled nodes in the order they
// were scheduled and approving every interrupt, and returns every step.
func drive(t *testing.T, p *pipeline.Pipeline, in map[string]any) []runstate.Step {
	t.Helper()
	type job struct {
		id        string
		iteration int
	}
	var queue []job
	var waiting []string
	enqueue := func(s runstate.Step) {
		for _, id := range s.Schedule {
			queue = append(queue, job{id, s.Next.Node(id).Iteration + 1})
		}
		waiting = append(waiting, s.Interrupts...)
	}
	steps := []runstate.Step{runstate.Start(p, in)}
	enqueue(steps[0])
	for n := 0; len(queue)+len(waiting) > 0; n++ {
		if n > 100 {
			t.Fatal("the run does not end")
		}
		cur := steps[len(steps)-1].Next
		var s runstate.Step
		if len(queue) > 0 {
			j := queue[0]
			queue = queue[1:]
			s = runstate.Complete(p, cur, j.id, j.iteration, 1, j.id+" out")
		} else {
			id := waiting[0]
			waiting = waiting[1:]
			s = runstate.Approve(p, cur, id, "ok")
		}
		steps = append(steps, s)
		enqueue(s)
	}
	return steps
}

// Folding every step's delta onto the empty state gives the last step's
// state: the store keeps only deltas, and this is how it rebuilds a state.
func TestDeltasFoldToState(t *testing.T) {
	t.Parallel()
	for _, name := range slices.Sorted(maps.Keys(graphs)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := load(t, name)
			for _, given := range []map[string]any{nil, {"run_a": true}} {
				if given != nil && name != "skip" {
					continue
				}
				steps := drive(t, p, inputs(t, p, given))
				var folded runstate.State
				for i, s := range steps {
					prev := folded.Clone()
					folded.Apply(s.Delta)
					if !reflect.DeepEqual(folded, s.Next) {
						t.Fatalf("step %d: the fold %+v\ndiffers from Next %+v (prev %+v)", i, folded, s.Next, prev)
					}
				}
				last := steps[len(steps)-1]
				if last.Status != runstate.RunSucceeded || runstate.Status(p, last.Next) != runstate.RunSucceeded {
					t.Errorf("the run ends %q / %q after %d steps", last.Status, runstate.Status(p, last.Next), len(steps))
				}
				if name == "loop" && (last.Next.Loops["revise"] != 2 || last.Next.Node("write").Iteration != 3) {
					t.Errorf("the loop ran %v times, write to iteration %d", last.Next.Loops, last.Next.Node("write").Iteration)
				}
			}
		})
	}
}

// Fork must not write into the caller's patch: Complete, Approve and Fail
// all work on copies of their inputs, and the engine passes a patch taken
// from the caller's request.
func TestForkDoesNotModifyPatch(t *testing.T) {
	t.Parallel()
	p := load(t, "approval")
	at := runstate.State{Nodes: map[string]pipeline.NodeState{"a": succeeded("a", 1), "gate": succeeded("ok", 1), "b": succeeded("b", 1)}}
	patch := runstate.State{Nodes: map[string]pipeline.NodeState{"gate": {Status: pipeline.StatusPending, Iteration: 1}}}
	orig := patch.Clone()
	step := runstate.Fork(p, at, patch)
	if !slices.Equal(step.Interrupts, []string{"gate"}) {
		t.Fatalf("Interrupts = %v, want [gate]", step.Interrupts)
	}
	if !reflect.DeepEqual(patch, orig) {
		t.Errorf("Fork modified its patch argument: %+v, was %+v", patch.Nodes, orig.Nodes)
	}
}
