package meshapi

import (
	"regexp"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// The marketplace's tools.
const (
	ToolListWorkers     = "list_workers"
	ToolDescribeWorker  = "describe_worker"
	ToolSpawnWorker     = "spawn_worker"
	ToolExecuteInWorker = "execute_in_worker"
	ToolGetWorkerState  = "get_worker_state"
	ToolListJourneys    = "list_journeys"
	ToolStopWorker      = "stop_worker"
	ToolWorkspaceDiff   = "workspace_diff"
	ToolExportWorkspace = "export_workspace"
	ToolWorkerLogs      = "worker_logs"
	ToolJourneyAudit    = "journey_audit"
)

// ToolMeshExecute is mesh-exec's tool: one agent turn in a repository.
const ToolMeshExecute = "mesh_execute"

// The _meta keys of progress notifications and results.
const (
	// SessionMetaKey is the _meta key of the progress notification of an
	// agent's first event that carries the agent's session id, so that a
	// client (the orchestrator) can save the session before the call
	// returns and resume it after a crash in the middle of a run.
	SessionMetaKey = "meshwork/session_id"
	// AgentEventMetaKey is the _meta key of a progress notification that
	// carries the agent event it reports (meshtype.AgentEvent).
	AgentEventMetaKey = meshtype.AgentEventMetaKey
)

// IDPattern is what a journey id or a mesh-exec session name may be: a
// letter or digit, then up to 127 letters, digits, dots, dashes or
// underscores. Ids become container names, volume names and file names, so
// nothing else is accepted.
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidID reports whether id matches IDPattern.
func ValidID(id string) bool { return IDPattern.MatchString(id) }

// MeshExecuteIn is mesh_execute's input.
type MeshExecuteIn struct {
	Repository  string `json:"repository,omitempty" jsonschema:"the repository directory, absolute or relative to the workspace root; created if missing (a resume may omit it)"`
	Task        string `json:"task" jsonschema:"what the agent should do"`
	SessionID   string `json:"session_id,omitempty" jsonschema:"continue this session (from an earlier result)"`
	ForkSession bool   `json:"fork_session,omitempty" jsonschema:"with session_id: continue a copy of the session under a new id, leaving the session itself as it was (a forked run)"`
	Timeout     int64  `json:"timeout,omitempty" jsonschema:"milliseconds before the agent is stopped (default 600000)"`
}

// MeshExecuteOut is mesh_execute's output.
type MeshExecuteOut struct {
	SessionID string              `json:"session_id"`
	Output    string              `json:"output"`
	Metadata  MeshExecuteMetadata `json:"metadata"`
}

// MeshExecuteMetadata describes one agent turn.
type MeshExecuteMetadata struct {
	Backend       string   `json:"backend"`
	IsError       bool     `json:"is_error"`
	CostUSD       float64  `json:"cost_usd"`
	DurationMS    int64    `json:"duration_ms"`
	NumTurns      int      `json:"num_turns"`
	InputTokens   int64    `json:"input_tokens,omitempty"`
	OutputTokens  int64    `json:"output_tokens,omitempty"`
	ToolsUsed     []string `json:"tools_used"`
	FilesModified []string `json:"files_modified"`
	ExitCode      int      `json:"exit_code"`
	// ToolCalls are the gate's decisions on the agent's own tool calls, in
	// order, when mesh-exec has a gate policy (--gate-policy).
	ToolCalls []meshtype.ToolDecision `json:"tool_calls,omitempty"`
}
