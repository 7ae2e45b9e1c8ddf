package claude

import (
	"encoding/json"
	"errors"
	"strings"
)

// The stream-json wire format: only the fields the parser reads. The CLI
// prints many more (see testdata/claude-code-2.1.330) and adds fields in
// new releases; unknown ones are ignored.

// event is one line of stream-json output, of any type.
type event struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`

	// assistant and user
	Message json.RawMessage `json:"message"`
	// assistant: set on the synthetic message the CLI prints for an API
	// failure, e.g. "authentication_failed" when it has no credentials.
	Error             json.RawMessage `json:"error"`
	IsAPIErrorMessage bool            `json:"is_api_error_message"`

	// system hook_response (with --include-hook-events)
	HookName  string `json:"hook_name"`
	HookEvent string `json:"hook_event"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExitCode  *int   `json:"exit_code"`
	Outcome   string `json:"outcome"`

	// result
	IsError      bool            `json:"is_error"`
	Result       string          `json:"result"`
	Errors       json.RawMessage `json:"errors"`
	TotalCostUSD float64         `json:"total_cost_usd"`
	NumTurns     int             `json:"num_turns"`
	DurationMS   int64           `json:"duration_ms"`
	Usage        struct {
		// Input tokens come in three counts: those read from the prompt
		// cache and those written to it are not in input_tokens.
		InputTokens              int64 `json:"input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
	} `json:"usage"`
	// PermissionDenials are the tool calls the CLI's own permission rules
	// refused, after the hooks had their say.
	PermissionDenials []permissionDenial `json:"permission_denials"`
}

// permissionDenial is one entry of a result's permission_denials.
type permissionDenial struct {
	ToolName  string `json:"tool_name"`
	ToolUseID string `json:"tool_use_id"`
}

// deniedCalls are the tool_use ids of a result's permission_denials.
func (ev *event) deniedCalls() map[string]bool {
	ids := make(map[string]bool, len(ev.PermissionDenials))
	for _, d := range ev.PermissionDenials {
		if d.ToolUseID != "" {
			ids[d.ToolUseID] = true
		}
	}
	return ids
}

// message is the message of an assistant or user event.
type message struct {
	// Content is a list of blocks, or a plain string for a user prompt.
	Content json.RawMessage `json:"content"`
}

// block is one content block of a message.
type block struct {
	Type string `json:"type"`
	// text
	Text string `json:"text"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result; Content is a string or a list of text blocks.
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// decode unmarshals data into v as far as it can. A field of an unexpected
// JSON type is left zero instead of failing the whole value, so one odd
// field in a new CLI release cannot hide a result event. It reports false
// when data is not JSON of the right shape at all.
func decode(data []byte, v any) bool {
	err := json.Unmarshal(data, v)
	var typeErr *json.UnmarshalTypeError
	return err == nil || errors.As(err, &typeErr)
}

// blocks returns the content blocks of a message; none when the content is
// not a list. A block that does not decode is skipped, not the message.
func (m message) blocks() []block {
	var raw []json.RawMessage
	if !decode(m.Content, &raw) {
		return nil
	}
	out := make([]block, 0, len(raw))
	for _, r := range raw {
		var b block
		if decode(r, &b) {
			out = append(out, b)
		}
	}
	return out
}

// text returns a tool result's content as text: the string itself, or the
// text blocks of a list joined by newlines (other blocks, such as images,
// are left out).
func (b block) text() string {
	var s string
	if decode(b.Content, &s) && s != "" {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if !decode(b.Content, &parts) {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// inputString returns the string field name of a tool_use input, or "".
func (b block) inputString(name string) string {
	var in map[string]json.RawMessage
	if !decode(b.Input, &in) {
		return ""
	}
	var s string
	if !decode(in[name], &s) {
		return ""
	}
	return s
}

// stringOrNothing returns raw as a string when it is a JSON string.
func stringOrNothing(raw json.RawMessage) string {
	var s string
	if !decode(raw, &s) {
		return ""
	}
	return s
}

// stringList returns raw as a list of strings, skipping anything else.
func stringList(raw json.RawMessage) []string {
	var items []json.RawMessage
	if !decode(raw, &items) {
		return nil
	}
	var out []string
	for _, it := range items {
		if s := stringOrNothing(it); s != "" {
			out = append(out, s)
		}
	}
	return out
}
