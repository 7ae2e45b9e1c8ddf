package pipeline

import "github.com/meshwork/meshwork/services/orchestrator/api"

// State is what a run knows when it evaluates a node: the inputs it was
// started with (as [Pipeline.CheckInputs] returned them) and the state of
// each node that has run so far. when and foreach expressions see it as
// inputs and nodes; templates see .inputs and .nodes.<id>.output.
type State struct {
	Inputs map[string]any       `json:"inputs"`
	Nodes  map[string]NodeState `json:"nodes"`
}

// NodeState is the state of one node in a run, as expressions see it:
// nodes.<id>.output, .status, .attempts and .iteration. It is the API's
// type: what a run's view and its events carry is what expressions read.
type NodeState = api.NodeState

// The values of NodeState.Status.
const (
	StatusPending   = api.StatusPending
	StatusRunning   = api.StatusRunning
	StatusWaiting   = api.StatusWaiting // an approval node waiting for its human
	StatusSucceeded = api.StatusSucceeded
	StatusFailed    = api.StatusFailed
	StatusSkipped   = api.StatusSkipped // its when was false
)
