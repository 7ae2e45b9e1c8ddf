package meshtype

// ActionType names what an action does.
type ActionType string

// The action types.
const (
	ActionRead   ActionType = "read"
	ActionWrite  ActionType = "write"
	ActionList   ActionType = "list"
	ActionSearch ActionType = "search"
	ActionExec   ActionType = "exec"
	ActionDelete ActionType = "delete"
	ActionTask   ActionType = "task"
	ActionTool   ActionType = "tool"
)

// ActionTypes lists every action type, in a stable order.
var ActionTypes = []ActionType{ActionRead, ActionWrite, ActionList, ActionSearch, ActionExec, ActionDelete, ActionTask, ActionTool}

// Valid reports whether t is one of the action types.
func (t ActionType) Valid() bool {
	switch t {
	case ActionRead, ActionWrite, ActionList, ActionSearch, ActionExec, ActionDelete, ActionTask, ActionTool:
		return true
	}
	return false
}

// Action is one request to a worker. The gate and the executor see the same
// value, so what was checked is what runs.
//
// The JSON names double as the field names CEL rules see (action.target).
type Action struct {
	Type ActionType `json:"type"`
	// Target is a path relative to the workspace root.
	Target string `json:"target,omitempty"`
	// Content is what a write puts into Target.
	Content string `json:"content,omitempty"`
	// Pattern is the regular expression (RE2) a search looks for.
	Pattern string `json:"pattern,omitempty"`
	// Command is an exec's argv; it never goes through a shell.
	Command []string `json:"command,omitempty"`
	// Task is free text for agent workers.
	Task string `json:"task,omitempty"`
	// Tool and Arguments name and parameterise a tool action.
	Tool      string         `json:"tool,omitempty"`
	Arguments map[string]any `json:"arguments,omitempty"`
}

// JourneyState is what the gate knows of a journey beyond the action itself:
// the counters that per-journey limits are checked against.
type JourneyState struct {
	// ActionCount is how many actions the journey has already executed.
	ActionCount int64 `json:"action_count"`
	// CostUSD is the agent spend of the journey so far.
	CostUSD float64 `json:"cost_usd"`
}

// Violation is one constraint an action breaks.
type Violation struct {
	ConstraintID string `json:"constraint_id"`
	Violated     bool   `json:"violated"`
	Message      string `json:"message"`
}
