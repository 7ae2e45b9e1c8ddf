package codex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

// The JSONL events of `codex exec --json`, as documented in docs/exec.md and
// defined in codex-rs/exec/src/exec_events.rs (github.com/openai/codex):
//
//	{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
//	{"type":"turn.started"}
//	{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc ls","aggregated_output":"","status":"in_progress"}}
//	{"type":"item.completed","item":{"id":"item_1","type":"command_execution",...,"exit_code":0,"status":"completed"}}
//	{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"..."}}
//	{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}
//	{"type":"turn.failed","error":{"message":"..."}}
//	{"type":"error","message":"..."}
//
// Item types: agent_message, reasoning, command_execution, file_change
// (changes[].path, .kind add|delete|update), mcp_tool_call (server, tool,
// arguments, result.content, error.message), web_search, todo_list, plan and
// error (a non-fatal warning).
//
// Success is decided by the turn's own end: turn.completed is a success even
// after error events (Codex reports retried stream errors that way),
// turn.failed is a failure. Codex reports tokens, never money, so CostUSD
// stays 0: mesh-exec does not guess at a price list.
type event struct {
	Type     string     `json:"type"`
	ThreadID string     `json:"thread_id"`
	Item     *item      `json:"item"`
	Usage    *usage     `json:"usage"`
	Error    *errorBody `json:"error"`
	Message  string     `json:"message"`
}

type item struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Message          string          `json:"message"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *float64        `json:"exit_code"`
	Status           string          `json:"status"`
	Changes          []change        `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           *mcpResult      `json:"result"`
	Error            *errorBody      `json:"error"`
	Query            string          `json:"query"`
}

type change struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

type mcpResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

type usage struct {
	// float64: a JSON number of any spelling decodes, so an odd number never
	// costs the whole line.
	InputTokens  float64 `json:"input_tokens"`
	OutputTokens float64 `json:"output_tokens"`
}

type errorBody struct {
	Message string `json:"message"`
}

type parser struct {
	sessionID string
	lastText  string
	started   map[string]bool
	tools     []string
	files     []string
	in, out   int64
	turns     int
	completed bool
	failed    bool
	failure   string
	lastError string // the last top-level error event
	warning   string // the last non-fatal error item
}

func newParser(req backend.Request) *parser {
	// A resumed run keeps its id even when Codex fails before thread.started.
	return &parser{sessionID: req.SessionID, started: map[string]bool{}}
}

// Line parses one line of `codex exec --json`.
func (p *parser) Line(line []byte) []backend.Event {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	var ev event
	if err := json.Unmarshal(line, &ev); err != nil {
		return nil
	}
	switch ev.Type {
	case "thread.started":
		if ev.ThreadID == "" {
			return nil
		}
		p.sessionID = ev.ThreadID
		return []backend.Event{{Kind: backend.KindInit, SessionID: ev.ThreadID}}
	case "item.started":
		if ev.Item == nil {
			return nil
		}
		return p.toolUse(ev.Item)
	case "item.completed":
		if ev.Item == nil {
			return nil
		}
		return p.itemCompleted(ev.Item)
	case "turn.completed":
		p.turns++
		p.completed, p.failed = true, false
		if ev.Usage != nil {
			p.in += cliout.Tokens(ev.Usage.InputTokens)
			p.out += cliout.Tokens(ev.Usage.OutputTokens)
		}
		return []backend.Event{{Kind: backend.KindResult, SessionID: p.sessionID, Text: p.lastText}}
	case "turn.failed":
		p.turns++
		p.failed, p.completed = true, false
		p.failure = "turn failed"
		if ev.Error != nil && ev.Error.Message != "" {
			p.failure = ev.Error.Message
		}
		return []backend.Event{{Kind: backend.KindError, SessionID: p.sessionID, Text: p.failure, IsError: true}}
	case "error":
		if ev.Message == "" {
			return nil
		}
		p.lastError = ev.Message
		return []backend.Event{{Kind: backend.KindError, Text: ev.Message, IsError: true}}
	}
	return nil
}

// toolName names an item the way ToolsUsed reports it: the item type, and
// for MCP calls Claude Code's mcp__server__tool spelling so tools_used reads
// the same across backends. "" for items that are not tool calls.
func toolName(it *item) string {
	switch it.Type {
	case "command_execution", "file_change", "web_search":
		return it.Type
	case "mcp_tool_call":
		return "mcp__" + it.Server + "__" + it.Tool
	}
	return ""
}

// toolUse reports a tool call once, when Codex first shows it: commands and
// MCP calls have an item.started, file changes often only an item.completed.
func (p *parser) toolUse(it *item) []backend.Event {
	name := toolName(it)
	if name == "" || p.started[it.ID] {
		return nil
	}
	if it.ID != "" {
		p.started[it.ID] = true
	}
	p.tools = cliout.AppendDistinct(p.tools, name)
	var text string
	switch it.Type {
	case "command_execution":
		text = it.Command
	case "file_change":
		parts := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			parts = append(parts, strings.TrimSpace(c.Kind+" "+c.Path))
		}
		text = strings.Join(parts, ", ")
	case "mcp_tool_call":
		text = string(it.Arguments)
	case "web_search":
		text = it.Query
	}
	return []backend.Event{{Kind: backend.KindToolUse, Tool: name, ToolCallID: it.ID, Text: text}}
}

func (p *parser) itemCompleted(it *item) []backend.Event {
	switch it.Type {
	case "agent_message":
		// Codex may say something before its work; the last message is the
		// answer (docs/exec.md: "Typically, an agent_message is added at
		// the end of the turn").
		p.lastText = it.Text
		if it.Text == "" {
			return nil
		}
		return []backend.Event{{Kind: backend.KindText, Text: it.Text}}
	case "error":
		// A non-fatal warning (a config or deprecation notice): kept as the
		// explanation of last resort, not reported as a failure.
		if it.Message != "" {
			p.warning = it.Message
		}
		return nil
	}
	name := toolName(it)
	if name == "" {
		// reasoning is a summary of the model's thinking, not its answer;
		// todo_list and plan are bookkeeping. None is a tool call.
		return nil
	}
	events := p.toolUse(it)
	res := backend.Event{Kind: backend.KindToolResult, Tool: name, ToolCallID: it.ID}
	switch it.Type {
	case "command_execution":
		res.Text = it.AggregatedOutput
		res.IsError = it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0)
	case "file_change":
		res.IsError = it.Status == "failed"
		if !res.IsError {
			for _, c := range it.Changes {
				if c.Path != "" {
					p.files = cliout.AppendDistinct(p.files, c.Path)
				}
			}
		}
		res.Text = it.Status
	case "mcp_tool_call":
		if it.Error != nil && it.Error.Message != "" {
			res.Text, res.IsError = it.Error.Message, true
		} else if it.Result != nil {
			var b strings.Builder
			for _, c := range it.Result.Content {
				if c.Type == "text" {
					b.WriteString(c.Text)
				}
			}
			res.Text = b.String()
		}
		res.IsError = res.IsError || it.Status == "failed"
	case "web_search":
		res.Text = it.Query
	}
	return append(events, res)
}

// Finish returns the run's result.
func (p *parser) Finish(exitCode int, stderr string) backend.Result {
	res := backend.Result{
		SessionID:     p.sessionID,
		NumTurns:      p.turns,
		InputTokens:   p.in,
		OutputTokens:  p.out,
		ToolsUsed:     p.tools,
		FilesModified: p.files,
	}
	switch {
	case p.failed:
		res.IsError = true
		res.Output = p.failure
	case p.completed:
		res.Output = p.lastText
		return res
	default:
		// No turn ended: Codex failed before or outside the turn (a bad
		// resume id, no credentials, a crash). Prefer what Codex said.
		res.IsError = true
		res.Output = cliout.FirstNonEmpty(p.lastError, cliout.StderrTail(stderr), p.warning,
			fmt.Sprintf("codex exited with code %d without finishing a turn", exitCode))
	}
	res.Err = classify(res.Output + "\n" + stderr)
	return res
}

// classify maps Codex's error texts to the errors callers branch on. Codex has
// no error codes in its JSON; these are the messages it prints (401 from the
// API when the login is missing or stale; "no rollout found" / "No saved
// session found" for an unknown session id).
func classify(msg string) error {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "no rollout found"), strings.Contains(m, "no saved session found"),
		strings.Contains(m, "session not found"), strings.Contains(m, "thread not found"):
		return backend.ErrSessionNotFound
	case strings.Contains(m, "401 unauthorized"), strings.Contains(m, "not logged in"),
		strings.Contains(m, "codex login"):
		return backend.ErrNotLoggedIn
	}
	return nil
}
