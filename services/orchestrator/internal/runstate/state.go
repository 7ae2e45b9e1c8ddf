// Package runstate is the pure core of a pipeline run: the state a run has at
// a checkpoint, the delta a checkpoint stores, and the transitions that take
// a run from one checkpoint to the next (a node finished, failed, was
// approved). It does no I/O, so the engine's store persists exactly what
// these functions decide, and the rules of a run (needs, when, next loops,
// approvals) are tested without a database.
//
// A checkpoint stores a delta, not the state: the nodes, loop counters and
// role sessions that changed. A run's state at a checkpoint is the fold of
// the deltas along its chain of parents ([State.Apply]); a fork's first
// checkpoint has the checkpoint it was forked from as its parent, so a fork
// copies nothing.
package runstate

import (
	"maps"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// State is a run's state at a checkpoint. It doubles as the delta format: a
// delta holds only what changed, and applying it replaces the entries it
// names. It is the API's state (what a checkpoint sends) with the engine's
// methods: the two convert into each other, and cannot drift apart.
type State api.State

// Clone returns a deep enough copy: maps are copied, values shared (they are
// never modified in place).
func (s State) Clone() State {
	return State{
		Inputs:   maps.Clone(s.Inputs),
		Nodes:    maps.Clone(s.Nodes),
		Loops:    maps.Clone(s.Loops),
		Sessions: maps.Clone(s.Sessions),
	}
}

// Apply applies delta d to s in place.
func (s *State) Apply(d State) {
	if d.Inputs != nil {
		s.Inputs = maps.Clone(d.Inputs)
	}
	s.Nodes = merge(s.Nodes, d.Nodes)
	s.Loops = merge(s.Loops, d.Loops)
	s.Sessions = merge(s.Sessions, d.Sessions)
}

// IsEmpty reports whether a delta changes nothing.
func (s State) IsEmpty() bool {
	return s.Inputs == nil && len(s.Nodes) == 0 && len(s.Loops) == 0 && len(s.Sessions) == 0
}

func merge[V any](dst, src map[string]V) map[string]V {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]V, len(src))
	}
	maps.Copy(dst, src)
	return dst
}

// Node returns node id's state; a node that never ran is pending.
func (s State) Node(id string) pipeline.NodeState {
	if n, ok := s.Nodes[id]; ok {
		return n
	}
	return pipeline.NodeState{Status: pipeline.StatusPending}
}

// Pipeline returns the state as the pipeline's expressions and templates see
// it.
func (s State) Pipeline() pipeline.State {
	return pipeline.State{Inputs: s.Inputs, Nodes: s.Nodes}
}
