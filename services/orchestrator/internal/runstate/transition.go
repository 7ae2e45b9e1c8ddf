package runstate

import (
	"fmt"
	"slices"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// Run statuses, as stored in runs.status.
const (
	RunRunning   = api.RunRunning   // agent nodes are ready or running
	RunWaiting   = api.RunWaiting   // only approvals are pending
	RunSucceeded = api.RunSucceeded // every reachable node finished
	RunFailed    = api.RunFailed    // a node failed for good
	RunCancelled = api.RunCancelled // cancelled by a caller
)

// Step is one transition: the delta to store as the next checkpoint and what
// the engine must do in the same transaction.
type Step struct {
	// Delta is the new checkpoint's content.
	Delta State
	// Schedule lists the agent nodes that became ready: each gets a job for
	// its next iteration, Next.Node(id).Iteration+1.
	Schedule []string
	// Interrupts lists the approval nodes that became ready and now wait.
	Interrupts []string
	// Status is the run's status after the step, and Error its error when
	// it failed.
	Status string
	Error  string
	// Next is the state after the step.
	Next State
}

// Start is the first step of a run with the given (checked) inputs.
func Start(p *pipeline.Pipeline, inputs map[string]any) Step {
	return advance(p, nil, State{Inputs: inputs}, State{Inputs: inputs})
}

// Fork is the first step of a fork: the state at the checkpoint it starts
// from, with the patch applied (a patch may give new inputs, and node states
// to change; a node set to pending runs again). It schedules every node that
// is ready in the patched state.
func Fork(p *pipeline.Pipeline, at State, patch State) Step {
	next := at.Clone()
	next.Apply(patch)
	// Everything ready is new to the fork: nothing runs for it yet.
	return advance(p, nil, next, patch.Clone())
}

// Resume continues a run from its state as it stands, scheduling every ready
// node (after a crash lost no job, this is only needed when a run is resumed
// under a migrated pipeline definition).
func Resume(p *pipeline.Pipeline, at State) Step {
	return advance(p, nil, at.Clone(), State{})
}

// Complete is the step for node id's success at iteration it, after attempts
// attempts, with the given output (already through the node's output
// template).
func Complete(p *pipeline.Pipeline, prev State, id string, iteration, attempts int, output string) Step {
	return CompleteWithPatch(p, prev, id, iteration, attempts, output, "", nil)
}

// CompleteWithPatch is Complete for a node whose worker made a change to
// its workspace: patch is kept as the node's patch, and omits as the
// changed files it leaves out.
func CompleteWithPatch(p *pipeline.Pipeline, prev State, id string, iteration, attempts int, output, patch string, omits []string) Step {
	next := prev.Clone()
	delta := State{}
	set(&next, &delta, id, pipeline.NodeState{Output: output, Patch: patch, PatchOmits: omits, Status: pipeline.StatusSucceeded, Attempts: attempts, Iteration: iteration})
	// What was ready before had a job, except this node (now done) and the
	// nodes a loop sends back: those need new jobs if ready again.
	readyBefore := slices.DeleteFunc(Ready(p, prev), func(r string) bool { return r == id })
	if n, ok := p.Node(id); ok && n.Next != "" && next.Loops[id] < n.MaxIterations {
		loops := next.Loops[id] + 1
		next.Loops = merge(next.Loops, map[string]int{id: loops})
		delta.Loops = merge(delta.Loops, map[string]int{id: loops})
		for _, r := range loopBody(p, n.Next) {
			ns := next.Node(r)
			if ns.Status == pipeline.StatusPending {
				if !slices.Contains(readyBefore, r) {
					continue // not reached yet in this pass
				}
				// Running in parallel on the old pass: a new iteration
				// makes its running job's result stale (refused), and
				// the node runs again on the new pass.
				ns.Iteration++
			}
			ns.Status, ns.Attempts = pipeline.StatusPending, 0
			set(&next, &delta, r, ns)
		}
		body := loopBody(p, n.Next)
		readyBefore = slices.DeleteFunc(readyBefore, func(r string) bool { return slices.Contains(body, r) })
	}
	return advance(p, readyBefore, next, delta)
}

// Approve is the step for approval node id resumed with value.
func Approve(p *pipeline.Pipeline, prev State, id string, value string) Step {
	next := prev.Clone()
	delta := State{}
	ns := next.Node(id)
	set(&next, &delta, id, pipeline.NodeState{Output: value, Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: ns.Iteration + 1})
	return advance(p, Ready(p, prev), next, delta)
}

// Fail is the step for node id failing for good at iteration it: the run
// fails.
func Fail(prev State, id string, iteration, attempts int, output, msg string) Step {
	next := prev.Clone()
	delta := State{}
	set(&next, &delta, id, pipeline.NodeState{Output: output, Status: pipeline.StatusFailed, Attempts: attempts, Iteration: iteration})
	return Step{Delta: delta, Next: next, Status: RunFailed, Error: fmt.Sprintf("node %s failed after %d attempt(s): %s", id, attempts, msg)}
}

// SetSession returns the delta recording role's session.
func SetSession(role, session string) State {
	return State{Sessions: map[string]string{role: session}}
}

func set(next, delta *State, id string, ns pipeline.NodeState) {
	next.Nodes = merge(next.Nodes, map[string]pipeline.NodeState{id: ns})
	delta.Nodes = merge(delta.Nodes, map[string]pipeline.NodeState{id: ns})
}

// loopBody returns target and every node that needs it, directly or not: what
// a next loop back to target runs again.
func loopBody(p *pipeline.Pipeline, target string) []string {
	in := map[string]bool{target: true}
	body := []string{}
	for _, id := range p.Order() {
		n, _ := p.Node(id)
		if in[id] || slices.ContainsFunc(n.Needs, func(d string) bool { return in[d] }) {
			in[id] = true
			body = append(body, id)
		}
	}
	return body
}

// Ready reports the nodes of s that are pending with every need finished
// (succeeded or skipped), in topological order: those running or due to run.
func Ready(p *pipeline.Pipeline, s State) []string {
	var out []string
	for _, id := range p.Order() {
		if isReady(p, s, id) {
			out = append(out, id)
		}
	}
	return out
}

func isReady(p *pipeline.Pipeline, s State, id string) bool {
	if s.Node(id).Status != pipeline.StatusPending {
		return false
	}
	n, _ := p.Node(id)
	for _, d := range n.Needs {
		if st := s.Node(d).Status; st != pipeline.StatusSucceeded && st != pipeline.StatusSkipped {
			return false
		}
	}
	return true
}

// advance finds the nodes of next that are ready and were not in
// readyBefore (those already have a job): nodes whose when is false are
// skipped (which may make more nodes ready), approvals start waiting, and
// agent nodes are scheduled.
func advance(p *pipeline.Pipeline, readyBefore []string, next, delta State) Step {
	before := map[string]bool{}
	for _, id := range readyBefore {
		before[id] = true
	}
	step := Step{}
	if readyBefore == nil {
		// A fork or a resume: approvals already waiting need their
		// interrupts (re)opened, as nothing else will.
		for _, id := range p.Order() {
			if next.Node(id).Status == pipeline.StatusWaiting {
				step.Interrupts = append(step.Interrupts, id)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, id := range Ready(p, next) {
			if before[id] || slices.Contains(step.Schedule, id) {
				continue
			}
			n, _ := p.Node(id)
			if n.When != "" {
				ok, err := p.EvalWhen(id, next.Pipeline())
				if err != nil {
					f := Fail(next, id, next.Node(id).Iteration+1, 0, "", "when: "+err.Error())
					f.Delta.Apply(delta)
					f.Delta.Nodes[id] = f.Next.Nodes[id]
					return f
				}
				if !ok {
					ns := next.Node(id)
					ns.Status, ns.Attempts = pipeline.StatusSkipped, 0
					set(&next, &delta, id, ns)
					changed = true
					continue
				}
			}
			if n.Type == pipeline.TypeApproval {
				ns := next.Node(id)
				ns.Status = pipeline.StatusWaiting
				set(&next, &delta, id, ns)
				step.Interrupts = append(step.Interrupts, id)
				changed = true
				continue
			}
			step.Schedule = append(step.Schedule, id)
		}
	}
	step.Delta, step.Next = delta, next
	step.Status = status(p, next)
	return step
}

// status derives a run's status from its state.
func status(p *pipeline.Pipeline, s State) string {
	if len(Ready(p, s)) > 0 {
		return RunRunning
	}
	for _, ns := range s.Nodes {
		switch ns.Status {
		case pipeline.StatusWaiting:
			return RunWaiting
		case pipeline.StatusFailed:
			return RunFailed
		}
	}
	return RunSucceeded
}

// Status derives a run's status from its state (failed when a node failed,
// waiting when only approvals wait, running while a node is ready or
// running, else succeeded).
func Status(p *pipeline.Pipeline, s State) string {
	for _, ns := range s.Nodes {
		if ns.Status == pipeline.StatusFailed {
			return RunFailed
		}
	}
	return status(p, s)
}
