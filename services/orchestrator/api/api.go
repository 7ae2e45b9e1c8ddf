// Package api is the orchestrator's HTTP API as its clients see it: the JSON
// of runs, checkpoints, interrupts, attempts, events and pipelines, as plain
// types that depend on nothing but the standard library and pkg/meshtype.
// meshctl and the API client (internal/apiclient) use these, never the
// engine's or the database's types, so they link no database driver, job
// queue or CEL.
//
// The server sends these types themselves: the engine returns a Run (the
// database's row, store.Run, embeds one beside the run's trace context,
// which is not sent), a checkpoint is a Checkpoint, the engine's node state,
// attempt, interrupt, agent event and event are aliases of these, its state
// (runstate.State) is a State with methods, and a pipeline's inputs convert
// from the pipeline file's (the same fields with YAML tags): a conversion
// that stops compiling if the two drift apart. The status and input type
// names are the server's constants too.
package api

import (
	"encoding/json"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// The run statuses.
const (
	RunRunning   = "running"
	RunWaiting   = "waiting"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// RunStatuses returns the run statuses, in the order a run passes them.
func RunStatuses() []string {
	return []string{RunRunning, RunWaiting, RunSucceeded, RunFailed, RunCancelled}
}

// MaxRequestBytes bounds a request to the orchestrator, over /v1 or /mcp:
// run inputs, approval values and fork patches are kept in Postgres with
// every checkpoint they belong to.
const MaxRequestBytes = 1 << 20

// How many runs one list returns: DefaultListLimit without a limit, and
// MaxListLimit at the most.
const (
	DefaultListLimit = 50
	MaxListLimit     = 1000
)

// PipelineList is the answer of GET /v1/pipelines and list_pipelines. Like
// every list of the API, over HTTP and MCP alike, it is never null: an
// empty one is [].
type PipelineList struct {
	Pipelines []PipelineSummary `json:"pipelines"`
}

// RunList is the answer of GET /v1/runs and list_runs.
type RunList struct {
	Runs []Run `json:"runs"`
}

// CheckpointList is the answer of GET /v1/runs/{id}/checkpoints and
// list_checkpoints.
type CheckpointList struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// PruneResult is the answer of POST /v1/runs/{id}/prune.
type PruneResult struct {
	// Deleted is how many checkpoints the prune removed.
	Deleted int64 `json:"deleted"`
}

// The node statuses.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusWaiting   = "waiting"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusSkipped   = "skipped"
)

// Run is a run.
type Run struct {
	ID            string     `json:"id"`
	Pipeline      string     `json:"pipeline"`
	PipelineHash  string     `json:"pipeline_hash"`
	Thread        string     `json:"thread"`
	Caller        string     `json:"caller,omitempty"`
	Status        string     `json:"status"`
	Error         string     `json:"error,omitempty"`
	HeadSeq       int        `json:"head_seq"`
	ForkedFromRun string     `json:"forked_from_run,omitempty"`
	ForkedFromSeq *int       `json:"forked_from_seq,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	TraceID       string     `json:"trace_id,omitempty"`
}

// NodeState is a node's state in a run.
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
	// PatchOmits lists the changed files Patch leaves out, too large for
	// a patch (over 4 MiB on either side): git apply neither creates,
	// changes nor deletes them. At most MaxPatchOmits paths.
	PatchOmits []string `json:"patch_omits,omitempty"`
}

// MaxPatchOmits bounds NodeState.PatchOmits: past it, the list is cut.
const MaxPatchOmits = 1000

// NodeView is a node of a run: its place in the pipeline and its state.
type NodeView struct {
	ID     string `json:"id"`
	Role   string `json:"role,omitempty"`
	Type   string `json:"type"`
	Status string `json:"status"`
	// Needs are the nodes this one waits for: the pipeline's edges.
	Needs []string `json:"needs,omitempty"`
	// Next is the node a loop goes back to after this one, if any.
	Next string `json:"next,omitempty"`
	NodeState
}

// RunView is a run with its state at its head.
type RunView struct {
	Run
	Inputs     map[string]any    `json:"inputs"`
	Nodes      []NodeView        `json:"nodes"`
	Outputs    map[string]string `json:"outputs"`
	Sessions   map[string]string `json:"sessions"`
	Interrupts []Interrupt       `json:"interrupts"`
	Attempts   []Attempt         `json:"attempts,omitempty"`
	Loops      map[string]int    `json:"loops,omitempty"`
	// PatchNode is the pipeline's patch node: its patch (and patch_omits),
	// in Nodes, is the run's patch. It is not repeated here, so that a run
	// is not read with its patch twice.
	PatchNode string `json:"patch_node,omitempty"`
}

// NodePatch is the patch of node in v, and the changed files it leaves
// out; ok is false when v has no such node.
func (v RunView) NodePatch(node string) (patch string, omits []string, ok bool) {
	for _, n := range v.Nodes {
		if n.ID == node {
			return n.Patch, n.PatchOmits, true
		}
	}
	return "", nil, false
}

// State is a run's state, or a delta of one (what a checkpoint changed:
// applying it replaces the entries it names).
type State struct {
	// Inputs are the run's inputs; set in a delta only when they change (the
	// start of a run, a fork's state patch).
	Inputs map[string]any `json:"inputs,omitempty"`
	// Nodes holds each node's state by id; a node that is absent is pending
	// and has never run.
	Nodes map[string]NodeState `json:"nodes,omitempty"`
	// Loops counts, by node id, how often the node's next was followed.
	Loops map[string]int `json:"loops,omitempty"`
	// Sessions holds each role's agent session id.
	Sessions map[string]string `json:"sessions,omitempty"`
}

// Checkpoint is one step of a run.
type Checkpoint struct {
	RunID     string    `json:"run_id"`
	Seq       int       `json:"seq"`
	ParentRun string    `json:"parent_run,omitempty"`
	ParentSeq *int      `json:"parent_seq,omitempty"`
	NodeID    string    `json:"node_id,omitempty"`
	Iteration int       `json:"iteration,omitempty"`
	Delta     State     `json:"delta"`
	CreatedAt time.Time `json:"created_at"`
	// Bytes is the stored size of the delta.
	Bytes int `json:"bytes"`
}

// Interrupt is an approval node waiting for, or given, its decision.
type Interrupt struct {
	ID        string          `json:"id"`
	RunID     string          `json:"run_id"`
	NodeID    string          `json:"node_id"`
	Iteration int             `json:"iteration"`
	Status    string          `json:"status"`
	Value     json.RawMessage `json:"value,omitempty"`
	DecidedBy string          `json:"decided_by,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	ResumedAt *time.Time      `json:"resumed_at,omitempty"`
}

// Attempt is one attempt of a node.
type Attempt struct {
	ID        int64   `json:"id"`
	RunID     string  `json:"run_id"`
	NodeID    string  `json:"node_id"`
	Iteration int     `json:"iteration"`
	Attempt   int     `json:"attempt"`
	JobID     int64   `json:"job_id,omitempty"`
	Replica   string  `json:"replica"`
	Status    string  `json:"status"`
	Error     string  `json:"error,omitempty"`
	SessionID string  `json:"session_id,omitempty"`
	CostUSD   float64 `json:"cost_usd,omitempty"`
	// Task is what the attempt was asked: its task rendered over the run's
	// state, or a command node's command (cut at 16 KiB; empty for a
	// foreach node, whose items each have their own).
	Task string `json:"task,omitempty"`
	// Journey is the marketplace journey the attempt worked in (a role
	// via marketplace): the workspace GET
	// /v1/runs/{id}/nodes/{node}/workspace exports.
	Journey string `json:"journey,omitempty"`
	// ChangeDigest is the digest of the workspace the attempt left in its
	// journey (the summary's digest): an export checks the journey still
	// holds it.
	ChangeDigest string     `json:"change_digest,omitempty"`
	StartedAt    time.Time  `json:"started_at"`
	FinishedAt   *time.Time `json:"finished_at,omitempty"`
}

// AgentEvent is what a running node's agent did, as its worker reported it.
type AgentEvent struct {
	ID     int64  `json:"id"`
	NodeID string `json:"node_id"`
	meshtype.AgentEvent
	At time.Time `json:"at"`
}

// Event is one event of a run's stream (GET /v1/runs/{id}/events).
type Event struct {
	// Type is "checkpoint" (a node finished, was skipped or started to
	// wait, or the run started), "attempt" (a node attempt finished; failed
	// ones are retried), "agent" (a running node's agent used a tool or was
	// refused one), or "run" (the run ended or parked; the last event).
	Type   string `json:"type"`
	RunID  string `json:"run_id"`
	Seq    int    `json:"seq,omitempty"`
	NodeID string `json:"node_id,omitempty"`
	// Nodes holds the nodes a checkpoint changed.
	Nodes map[string]NodeState `json:"nodes,omitempty"`
	// Attempt is set on attempt events.
	Attempt *Attempt `json:"attempt,omitempty"`
	// Agent is set on agent events: what a running node's agent did or was
	// refused, as its worker reported it.
	Agent *AgentEvent `json:"agent,omitempty"`
	// Status and Error are the run's, on run events.
	Status string    `json:"status,omitempty"`
	Error  string    `json:"error,omitempty"`
	At     time.Time `json:"at"`
}

// InputType is a pipeline input's type.
type InputType string

// The input types.
const (
	TypeString     InputType = "string"
	TypeNumber     InputType = "number"
	TypeBoolean    InputType = "boolean"
	TypeObject     InputType = "object"
	TypeRepository InputType = "repository"
)

// Input is a pipeline's declared input.
type Input struct {
	Type        InputType `json:"type"`
	Required    bool      `json:"required,omitempty"`
	Default     any       `json:"default,omitempty"`
	Description string    `json:"description,omitempty"`
}

// PipelineSummary is a pipeline of the catalog.
type PipelineSummary struct {
	Name        string           `json:"name"`
	Description string           `json:"description,omitempty"`
	Inputs      map[string]Input `json:"inputs"`
	// Hash identifies the pipeline's definition; a run records the hash it
	// started under.
	Hash string `json:"hash"`
}

// StartRequest starts a run (POST /v1/runs).
type StartRequest struct {
	Pipeline string         `json:"pipeline"`
	Inputs   map[string]any `json:"inputs,omitempty"`
	Thread   string         `json:"thread,omitempty"`
}
