package pipeline

// State is what a run knows when it evaluates a node: the inputs it was
// started with (as [Pipeline.CheckInputs] returned them) and the state of
// each node that has run so far. when and foreach expressions see it as
// inputs and nodes; templates see .inputs and .nodes.<id>.output.
type State struct {
	Inputs map[string]any       `json:"inputs"`
	Nodes  map[string]NodeState `json:"nodes"`
}

// NodeState is the state of one node in a run, as expressions see it:
// nodes.<id>.output, .status, .attempts and .iteration.
type NodeState struct {
	// Output is the node's output: its role's reply (through the node's
	// output template, if any), or an approval's resume value.
	Output string `json:"output"`
	// Status is one of the Status constants.
	Status string `json:"status"`
	// Attempts counts the attempts of the node's latest iteration.
	Attempts int `json:"attempts"`
	// Iteration counts how many times the node has run, from 1; it grows
	// when a next loop runs the node again.
	Iteration int `json:"iteration"`
	// Patch is the change the node's worker made to its workspace, as a
	// git-format diff against its base: set for nodes of roles with a
	// source, taken through the worker's result gate.
	Patch string `json:"patch,omitempty"`
}

// The values of NodeState.Status.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusWaiting   = "waiting" // an approval node waiting for its human
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusSkipped   = "skipped" // its when was false
)
