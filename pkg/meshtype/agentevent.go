package meshtype

// AgentEventMetaKey is the _meta key of a progress notification that
// carries an agent event (mesh_execute's, and execute_in_worker's on agent
// workers, which pass them on).
const AgentEventMetaKey = "meshwork/agent_event"

// AgentEvent is one thing an agent did or was refused, as its worker reports
// it while it runs: the hooks' normalized events.
type AgentEvent struct {
	// Kind is pre_tool, post_tool, tool_error, stop, notification or
	// permission_request.
	Kind       string `json:"kind"`
	Tool       string `json:"tool,omitempty"`
	ToolCallID string `json:"tool_use_id,omitempty"`
	// Text says what happened, for people: "Editing main.go".
	Text    string `json:"text,omitempty"`
	IsError bool   `json:"is_error,omitempty"`
	// Decision is the gate's, on pre_tool events.
	Decision *ToolDecision `json:"decision,omitempty"`
}

// ToolDecision is the gate's decision on one tool call of an agent.
type ToolDecision struct {
	ToolCallID string `json:"tool_use_id,omitempty"`
	Tool       string `json:"tool"`
	// Summary says what the call does, for people: "Editing main.go".
	Summary    string      `json:"summary"`
	Allowed    bool        `json:"allowed"`
	Violations []Violation `json:"violations,omitempty"`
}
