package jsonstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

// Codex describes the OpenAI Codex CLI, run headless as `codex exec --json`.
//
// A new session is
//
//	codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox [--model=M] -- TASK
//
// and a resume is the same with `resume SESSION_ID` before the `--`. The
// flags go before the `resume` subcommand: older releases only parsed them
// there (openai/codex#3817), current ones accept both places. The `--` keeps
// a task that starts with "-" or reads "resume"/"review" from being taken for
// a flag or a subcommand.
//
// Approvals and sandbox: `codex exec` never asks for approval, and its default
// sandbox is read-only, so it could not edit the repository. Codex's own
// sandbox (bubblewrap or Landlock) needs user namespaces that Docker's default
// seccomp profile refuses, so inside a mesh-exec container every command would
// fail (openai/codex#17337, #9292, #6828). mesh-exec already runs the agent in
// a hardened container as a non-root user, which is the "externally
// sandboxed environment" that --dangerously-bypass-approvals-and-sandbox is
// documented for (codex-rs/exec/src/cli.rs). --full-auto, the older choice, is
// deprecated in favour of --sandbox workspace-write and would hit the same
// namespace problem. --skip-git-repo-check lets the agent work in a repository
// that is not a Git checkout.
//
// The output format, JSON Lines of thread.started, turn.*, item.* and error
// events, comes from docs/exec.md and codex-rs/exec/src/exec_events.rs in
// github.com/openai/codex; see codexEvent.
//
// Request fields Codex has no flag for are left out: AllowedTools, MaxTurns,
// AppendSystemPrompt and MCPConfig (Codex reads MCP servers from its own
// config.toml, not from a Claude-style JSON file).
func Codex() CLI {
	return CLI{
		Name:  "codex",
		Flags: []string{"exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"},
		Model: flagValue("--model"),
		// The flags go before the subcommand (see above).
		Resume: func(id string) []string { return []string{"resume", id} },
		Prompt: afterDashes,
		// Codex also resumes by thread name; mesh-exec only stores the
		// thread ids (UUIDs, as in the rollout file names under
		// ~/.codex/sessions) that Codex printed.
		Session: uuidPattern, SessionShape: "a UUID",
		Check: func(req backend.Request) error {
			if req.Task == "-" {
				// Codex reads a prompt of "-" from stdin, which is /dev/null here.
				return errors.New(`a task of "-" means "read stdin" to codex`)
			}
			return nil
		},
		NewDecoder: func() Decoder { return &codexDecoder{started: map[string]bool{}} },
		NoEnd:      func(exit int) string { return fmt.Sprintf("codex exited with code %d without finishing a turn", exit) },
		// Codex has no error codes in its JSON; these are the messages it
		// prints (401 from the API when the login is missing or stale; "no
		// rollout found" / "No saved session found" for an unknown session).
		Rules: []Rule{
			{Messages: []string{"no rollout found", "no saved session found", "session not found", "thread not found"}, Err: backend.ErrSessionNotFound},
			{Messages: []string{"401 unauthorized", "not logged in", "codex login"}, Err: backend.ErrNotLoggedIn},
		},
	}
}

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
type codexEvent struct {
	Type     string          `json:"type"`
	ThreadID string          `json:"thread_id"`
	Item     *codexItem      `json:"item"`
	Usage    *codexUsage     `json:"usage"`
	Error    *codexErrorBody `json:"error"`
	Message  string          `json:"message"`
}

type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             string          `json:"text"`
	Message          string          `json:"message"`
	Command          string          `json:"command"`
	AggregatedOutput string          `json:"aggregated_output"`
	ExitCode         *float64        `json:"exit_code"`
	Status           string          `json:"status"`
	Changes          []codexChange   `json:"changes"`
	Server           string          `json:"server"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
	Result           *codexMCPResult `json:"result"`
	Error            *codexErrorBody `json:"error"`
	Query            string          `json:"query"`
}

type codexChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

type codexMCPResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

type codexUsage struct {
	// float64: a JSON number of any spelling decodes, so an odd number never
	// costs the whole line.
	InputTokens  float64 `json:"input_tokens"`
	OutputTokens float64 `json:"output_tokens"`
}

type codexErrorBody struct {
	Message string `json:"message"`
}

type codexDecoder struct {
	started map[string]bool // the items whose tool call was reported
}

func (d *codexDecoder) Decode(r *Run, line []byte) []backend.Event {
	var ev codexEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return nil
	}
	switch ev.Type {
	case "thread.started":
		return r.NameSession(ev.ThreadID)
	case "item.started":
		if ev.Item == nil {
			return nil
		}
		return d.toolUse(r, ev.Item)
	case "item.completed":
		if ev.Item == nil {
			return nil
		}
		return d.itemCompleted(r, ev.Item)
	case "turn.completed":
		r.Turns++
		r.Ended, r.Failure = true, ""
		if ev.Usage != nil {
			r.InputTokens += cliout.Tokens(ev.Usage.InputTokens)
			r.OutputTokens += cliout.Tokens(ev.Usage.OutputTokens)
		}
		return []backend.Event{{Kind: backend.KindResult, SessionID: r.SessionID, Text: r.Answer}}
	case "turn.failed":
		r.Turns++
		r.Failure = "turn failed"
		if ev.Error != nil && ev.Error.Message != "" {
			r.Failure = ev.Error.Message
		}
		return []backend.Event{{Kind: backend.KindError, SessionID: r.SessionID, Text: r.Failure, IsError: true}}
	case "error":
		return r.ReportError(ev.Message)
	}
	return nil
}

// codexToolName names an item the way ToolsUsed reports it: the item type,
// and for MCP calls Claude Code's mcp__server__tool spelling so tools_used
// reads the same across backends. "" for items that are not tool calls.
func codexToolName(it *codexItem) string {
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
func (d *codexDecoder) toolUse(r *Run, it *codexItem) []backend.Event {
	name := codexToolName(it)
	if name == "" || d.started[it.ID] {
		return nil
	}
	if it.ID != "" && len(d.started) < 100000 {
		d.started[it.ID] = true
	}
	r.UsedTool(name)
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

func (d *codexDecoder) itemCompleted(r *Run, it *codexItem) []backend.Event {
	switch it.Type {
	case "agent_message":
		// Codex may say something before its work; the last message is the
		// answer (docs/exec.md: "Typically, an agent_message is added at
		// the end of the turn").
		r.Answer = it.Text
		if it.Text == "" {
			return nil
		}
		return []backend.Event{{Kind: backend.KindText, Text: it.Text}}
	case "error":
		// A non-fatal warning (a config or deprecation notice): kept as the
		// explanation of last resort, not reported as a failure.
		r.Warn(it.Message)
		return nil
	}
	name := codexToolName(it)
	if name == "" {
		// reasoning is a summary of the model's thinking, not its answer;
		// todo_list and plan are bookkeeping. None is a tool call.
		return nil
	}
	events := d.toolUse(r, it)
	res := backend.Event{Kind: backend.KindToolResult, Tool: name, ToolCallID: it.ID}
	switch it.Type {
	case "command_execution":
		res.Text = it.AggregatedOutput
		res.IsError = it.Status == "failed" || it.Status == "declined" || (it.ExitCode != nil && *it.ExitCode != 0)
	case "file_change":
		res.IsError = it.Status == "failed"
		if !res.IsError {
			for _, c := range it.Changes {
				r.Wrote(c.Path)
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
