package main

import (
	"crypto/rand"
	"encoding/json"
	"time"
)

// The stream-json events, with the real CLI's field sets in its order
// (testdata/claude-code-2.1.330 of the claude backend), so a diff against a
// capture shows only values.

type initEvent struct {
	Type                    string            `json:"type"`
	Subtype                 string            `json:"subtype"`
	Cwd                     string            `json:"cwd"`
	SessionID               string            `json:"session_id"`
	Tools                   []string          `json:"tools"`
	MCPServers              []mcpServerStatus `json:"mcp_servers"`
	Model                   string            `json:"model"`
	PermissionMode          string            `json:"permissionMode"`
	SlashCommands           []string          `json:"slash_commands"`
	TerminalSlashCommands   []string          `json:"terminal_slash_commands"`
	APIKeySource            string            `json:"apiKeySource"`
	ClaudeCodeVersion       string            `json:"claude_code_version"`
	OutputStyle             string            `json:"output_style"`
	Agents                  []string          `json:"agents"`
	Skills                  []string          `json:"skills"`
	Plugins                 []plugin          `json:"plugins"`
	Capabilities            []string          `json:"capabilities"`
	AnalyticsDisabled       bool              `json:"analytics_disabled"`
	ProductFeedbackDisabled bool              `json:"product_feedback_disabled"`
	ServedByAnthropic       bool              `json:"served_by_anthropic"`
	UUID                    string            `json:"uuid"`
	MemoryPaths             map[string]string `json:"memory_paths"`
	OriginalCwd             string            `json:"original_cwd"`
	AdditionalDirectories   []string          `json:"additional_directories"`
	MessagingSocketPath     string            `json:"messaging_socket_path"`
	FastModeState           string            `json:"fast_mode_state"`
	FastModeDisabledReason  string            `json:"fast_mode_disabled_reason"`
	PerTurnEffortActive     bool              `json:"per_turn_effort_active"`
	UltrathinkAvailable     bool              `json:"ultrathink_available"`
	UltrathinkTypedRaises   bool              `json:"ultrathink_typed_raises"`
	ViewMode                string            `json:"view_mode"`
}

type mcpServerStatus struct {
	Name   string `json:"name"`
	Status string `json:"status"`
}

type plugin struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Source string `json:"source"`
}

type assistantEvent struct {
	Type              string           `json:"type"`
	Message           assistantMessage `json:"message"`
	ParentToolUseID   *string          `json:"parent_tool_use_id"`
	SessionID         string           `json:"session_id"`
	UUID              string           `json:"uuid"`
	Timestamp         string           `json:"timestamp"`
	Error             string           `json:"error,omitempty"`
	IsAPIErrorMessage bool             `json:"is_api_error_message,omitempty"`
}

type assistantMessage struct {
	Diagnostics       any            `json:"diagnostics"`
	ID                string         `json:"id"`
	Container         any            `json:"container"`
	Model             string         `json:"model"`
	Role              string         `json:"role"`
	StopDetails       any            `json:"stop_details"`
	StopReason        string         `json:"stop_reason"`
	StopSequence      any            `json:"stop_sequence"`
	Type              string         `json:"type"`
	Usage             messageUsage   `json:"usage"`
	Content           []contentBlock `json:"content"`
	ContextManagement any            `json:"context_management"`
}

type messageUsage struct {
	OutputTokensDetails      any           `json:"output_tokens_details"`
	InputTokens              int64         `json:"input_tokens"`
	OutputTokens             int64         `json:"output_tokens"`
	CacheCreationInputTokens int64         `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64         `json:"cache_read_input_tokens"`
	ServerToolUse            serverToolUse `json:"server_tool_use"`
	ServiceTier              any           `json:"service_tier"`
	CacheCreation            cacheCreation `json:"cache_creation"`
	InferenceGeo             any           `json:"inference_geo"`
	Iterations               any           `json:"iterations"`
	Speed                    any           `json:"speed"`
	FallbackCredit           any           `json:"fallback_credit"`
}

type serverToolUse struct {
	WebSearchRequests int `json:"web_search_requests"`
	WebFetchRequests  int `json:"web_fetch_requests"`
}

type cacheCreation struct {
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
	Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
}

// contentBlock is a text, tool_use or tool_result block.
type contentBlock struct {
	ToolUseID string `json:"tool_use_id,omitempty"`
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Input     any    `json:"input,omitempty"`
	Content   any    `json:"content,omitempty"`
	IsError   *bool  `json:"is_error,omitempty"`
}

type userEvent struct {
	Type            string      `json:"type"`
	Message         userMessage `json:"message"`
	ParentToolUseID *string     `json:"parent_tool_use_id"`
	SessionID       string      `json:"session_id"`
	UUID            string      `json:"uuid"`
	Timestamp       string      `json:"timestamp"`
	ToolUseResult   any         `json:"tool_use_result,omitempty"`
}

type userMessage struct {
	Role    string         `json:"role"`
	Content []contentBlock `json:"content"`
}

// resultEvent is the final event of a run that got as far as its turn.
type resultEvent struct {
	DurationAPIMS          int64           `json:"duration_api_ms"`
	StopReason             any             `json:"stop_reason"`
	SessionID              string          `json:"session_id"`
	TotalCostUSD           float64         `json:"total_cost_usd"`
	Usage                  resultUsage     `json:"usage"`
	ModelUsage             map[string]any  `json:"modelUsage"`
	PermissionDenials      []any           `json:"permission_denials"`
	TerminalReason         string          `json:"terminal_reason"`
	FastModeState          string          `json:"fast_mode_state"`
	FastModeDisabledReason string          `json:"fast_mode_disabled_reason"`
	SubagentStats          json.RawMessage `json:"subagent_stats"`
	SafetyStops            int             `json:"safety_stops"`
	IsError                bool            `json:"is_error"`
	NumTurns               int             `json:"num_turns"`
	Subtype                string          `json:"subtype"`
	APIErrorStatus         any             `json:"api_error_status"`
	Result                 string          `json:"result"`
	Type                   string          `json:"type"`
	DurationMS             int64           `json:"duration_ms"`
	UUID                   string          `json:"uuid"`
	QueuedTurnCount        int             `json:"queued_turn_count"`
	ResultIndex            int             `json:"result_index"`
	// Only in stream-json; --output-format json leaves it out.
	// (An interface, so that an empty map is printed and nil is left out.)
	ModelUsageSinceLastResult any `json:"model_usage_since_last_result,omitempty"`
}

type resultUsage struct {
	OutputTokensDetails      map[string]int64 `json:"output_tokens_details"`
	InputTokens              int64            `json:"input_tokens"`
	CacheCreationInputTokens int64            `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64            `json:"cache_read_input_tokens"`
	OutputTokens             int64            `json:"output_tokens"`
	ServerToolUse            serverToolUse    `json:"server_tool_use"`
	ServiceTier              string           `json:"service_tier"`
	CacheCreation            cacheCreation    `json:"cache_creation"`
	InferenceGeo             string           `json:"inference_geo"`
	Iterations               []any            `json:"iterations"`
	Speed                    string           `json:"speed"`
	FallbackCredit           any              `json:"fallback_credit"`
}

// errorResultEvent is the only event of a run that failed before its turn
// started (an unknown --resume id).
type errorResultEvent struct {
	Type              string         `json:"type"`
	Subtype           string         `json:"subtype"`
	DurationMS        int64          `json:"duration_ms"`
	DurationAPIMS     int64          `json:"duration_api_ms"`
	IsError           bool           `json:"is_error"`
	NumTurns          int            `json:"num_turns"`
	StopReason        any            `json:"stop_reason"`
	SessionID         string         `json:"session_id"`
	TotalCostUSD      float64        `json:"total_cost_usd"`
	Usage             resultUsage    `json:"usage"`
	ModelUsage        map[string]any `json:"modelUsage"`
	PermissionDenials []any          `json:"permission_denials"`
	UUID              string         `json:"uuid"`
	Errors            []string       `json:"errors"`
	ResultIndex       int            `json:"result_index"`
}

// newResultUsage is a result's usage with these token counts.
func newResultUsage(in, out int64) resultUsage {
	return resultUsage{
		OutputTokensDetails: map[string]int64{"thinking_tokens": 0},
		InputTokens:         in,
		OutputTokens:        out,
		ServiceTier:         "standard",
		Iterations:          []any{},
		Speed:               "standard",
	}
}

const subagentStats = `{"spawned":0,"requested":{"background":0,"foreground":0,"unset":0},"started_in_background":0,"max_depth":0,"spawned_by_subagents":0,"completed":0,"failed":0,"killed":{"parent":0,"user":0,"system":0},"refused":{"depth_limit":0,"concurrency_limit":0,"budget":0},"by_type":{}}`

// What the init event lists, as 2.1.330 does.
var (
	builtinTools = []string{"Task", "Bash", "CronCreate", "CronDelete", "CronList", "DesignSync", "Edit", "EnterWorktree", "ExitWorktree", "ListAgents", "Monitor", "NotebookEdit", "Read", "ReportFindings", "ScheduleWakeup", "SendMessage", "Skill", "TaskStop", "ToolSearch", "WebFetch", "WebSearch", "Workflow", "Write"}
	skills       = []string{"deep-research", "design", "design-sync", "dataviz", "update-config", "verify", "debug", "code-review", "simplify", "batch", "fewer-permission-prompts", "doctor", "loop", "claude-api", "workflow-authoring", "run", "run-skill-generator", "plugin-authoring"}
	slashCmds    = append(append([]string{}, skills...), "agents", "auto-mode-setup", "autocompact", "clear", "color", "compact", "config", "output-style", "context", "effort", "fast", "focus", "heapdump", "init", "mcp", "model", "__remote-workflow", "workflow-launch-exec", "reload-plugins", "reload-skills", "rename", "security-review", "usage", "insights", "recap", "goal", "design-consent", "design-revoke", "list-agents", "team-onboarding")
	terminalCmds = []string{"doctor", "color", "focus", "reload-plugins"}
	agents       = []string{"claude", "Explore", "general-purpose", "Plan", "statusline-setup"}
	plugins      = []plugin{
		{Name: "cc-plugin-agents-md", Path: "builtin", Source: "cc-plugin-agents-md@builtin"},
		{Name: "cc-plugin-telemetry", Path: "builtin", Source: "cc-plugin-telemetry@builtin"},
		{Name: "cc-plugin-privacy", Path: "builtin", Source: "cc-plugin-privacy@builtin"},
		{Name: "cc-plugin-plugin-authoring", Path: "builtin", Source: "cc-plugin-plugin-authoring@builtin"},
	}
	capabilities = []string{"interrupt_receipt_v1", "interrupt_cancel_queued_v1", "interrupt_send_now_v1", "interrupt_requeue_taken_v1", "msg_lifecycle_v1", "request_marker_lists_v1", "ask_user_question_unanswered_v1", "lifecycle_wakeup_source_v1", "sdk_mcp_tools_list_changed", "sdk_mcp_manifests", "mcp_read_resource_v1", "mcp_tool_ui_meta_v1", "ui_surface_v1", "mcp_call_result_not_for_model_v1", "mcp_call_check_permissions_v1", "voice_call_talk_line_v1", "withdrawn_files_note_v2", "withdrawn_tools_v1", "ui_pane_widget_v1", "reload_plugins_refuse_if_busy_v1", "get_usage_detached_v1", "silent_resend_files_v1"}
)

// defaultModel is what init reports without --model.
const defaultModel = "claude-opus-5-5"

// newToolUseID returns an id in the API's toolu_ form.
func newToolUseID() string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "toolu_01" + string(b)
}

func timestamp() string {
	return time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
}
