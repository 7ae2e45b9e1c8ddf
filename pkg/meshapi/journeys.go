package meshapi

import (
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Journey is the output of get_worker_state and one entry of
// list_journeys: a journey's state, worker, container, times, counts and
// cost.
type Journey struct {
	JourneyID      string    `json:"journey_id"`
	WorkerID       string    `json:"worker_id"`
	State          string    `json:"state"`
	IsolationLevel string    `json:"isolation_level"`
	ContainerID    string    `json:"container_id,omitempty"`
	Workspace      string    `json:"workspace,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	LastUsedAt     time.Time `json:"last_used_at"`
	ActionCount    int64     `json:"action_count" jsonschema:"actions executed (the count max_actions limits)"`
	Refused        int64     `json:"refused_count" jsonschema:"actions the gate refused"`
	Failed         int64     `json:"failed_count" jsonschema:"allowed actions that failed to run"`
	CostUSD        float64   `json:"cost_usd"`
	SessionID      string    `json:"session_id,omitempty" jsonschema:"agent session id, for agent workers"`
	DefinitionHash string    `json:"definition_hash"`
}

// JourneyStates are the states list_journeys may be asked for.
var JourneyStates = []string{"starting", "active", "stopped", "orphaned", "failed"}

// ListJourneysIn is the input of list_journeys.
type ListJourneysIn struct {
	State  string `json:"state,omitempty" jsonschema:"only journeys in this state: starting, active, stopped, orphaned or failed"`
	Limit  int    `json:"limit,omitempty" jsonschema:"journeys per page, newest first (default 100, at most 500)"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page, for the page after it"`
}

// ListJourneysOut is the output of list_journeys.
type ListJourneysOut struct {
	Journeys []Journey `json:"journeys"`
	// NextCursor is set when more journeys follow.
	NextCursor string `json:"next_cursor,omitempty" jsonschema:"set when more journeys follow: pass it as cursor for the next page"`
}

// StopWorkerIn is the input of stop_worker.
type StopWorkerIn struct {
	JourneyID string `json:"journey_id"`
	Workspace string `json:"workspace,omitempty" jsonschema:"keep (default: the workspace stays for a later resume), archive (a tarball of it is written, then everything is removed), patch (the diff against the base is returned, then everything is removed) or delete (everything is removed)"`
}

// StopWorkerOut is the output of stop_worker.
type StopWorkerOut struct {
	JourneyID string `json:"journey_id"`
	State     string `json:"state"`
	Archive   string `json:"archive,omitempty" jsonschema:"path of the workspace tarball on the marketplace host (archive mode)"`
	Bytes     int64  `json:"archive_bytes,omitempty"`
	SHA256    string `json:"archive_sha256,omitempty"`
	// Patch and Summary: the change, in patch mode.
	Patch   string                  `json:"patch,omitempty" jsonschema:"patch mode: the git-format diff against the base"`
	Summary *meshtype.ChangeSummary `json:"summary,omitempty" jsonschema:"patch mode: what the patch changes"`
	// Nested are the nested journeys stopped with this one
	// ("<caller>/<journey id>").
	Nested []string `json:"nested_stopped,omitempty" jsonschema:"nested journeys (spawned by this journey's agent) stopped with it"`
	// Refusal: in patch mode, the result gate refused the change and
	// nothing was stopped or removed.
	Refusal
}

// Refusal is a result gate's refusal of a journey's change, in the output
// of the tools that take a change out (workspace_diff, export_workspace,
// stop_worker in patch mode): the call is then an error result that still
// carries its output.
type Refusal struct {
	Refused    bool                 `json:"refused,omitempty"`
	Violations []meshtype.Violation `json:"violations,omitempty"`
	Message    string               `json:"message,omitempty"`
}

// IsRefused reports whether the result gate refused the change.
func (r Refusal) IsRefused() bool { return r.Refused }

// JourneyAuditIn is the input of journey_audit.
type JourneyAuditIn struct {
	JourneyID string `json:"journey_id"`
	Limit     int    `json:"limit,omitempty" jsonschema:"entries per page, newest first (default 100, at most 500)"`
	Before    int64  `json:"before,omitempty" jsonschema:"next_before of the previous page, for the older entries"`
}

// JourneyAuditOut is the output of journey_audit: a page of the journey's
// audit log, newest first.
type JourneyAuditOut struct {
	JourneyID string       `json:"journey_id"`
	Entries   []AuditEntry `json:"entries"`
	// NextBefore is set when older entries follow.
	NextBefore int64 `json:"next_before,omitempty" jsonschema:"set when older entries follow: pass it as before for the next page"`
}

// AuditEntry is one row of a journey's audit log: an action the gate
// decided, a result taken out (a diff, an export), one of an agent's own
// tool calls during an action (type agent_tool, with its action as
// parent_id) or an egress connection.
type AuditEntry struct {
	ID         int64                `json:"id"`
	At         time.Time            `json:"at"`
	Caller     string               `json:"caller"`
	Type       string               `json:"type"`
	Target     string               `json:"target,omitempty"`
	Decision   string               `json:"decision" jsonschema:"allowed (it ran), refused (the gate refused it; nothing ran) or failed (allowed, but running it failed)"`
	Violations []meshtype.Violation `json:"violations,omitempty"`
	Error      string               `json:"error,omitempty" jsonschema:"why an allowed action failed"`
	DurationMS float64              `json:"duration_ms"`
	CostUSD    float64              `json:"cost_usd,omitempty"`
	TraceID    string               `json:"trace_id,omitempty"`
	ParentID   int64                `json:"parent_id,omitempty" jsonschema:"the action an agent's tool call belongs to"`
}

// The page sizes of list_journeys and journey_audit.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 500
)
