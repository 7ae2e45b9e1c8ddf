package jsonstream

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

// Gemini describes Google's Gemini CLI (github.com/google-gemini/gemini-cli),
// run headless as
//
//	gemini --output-format=stream-json --approval-mode=yolo [--model=M] [--resume=SESSION_ID] --prompt=TASK
//
// Every value travels in the same argument as its flag (--prompt=TASK), so a
// task or model that starts with "-" cannot be read as a flag by yargs. The
// prompt goes through --prompt rather than as a positional argument because
// with --resume only --prompt (or stdin) is accepted
// (google-gemini/gemini-cli#14180).
//
// Approvals: headless Gemini CLI cannot ask, so a tool call that needs
// approval is refused. mesh-exec runs the agent inside an isolated container,
// so it approves them all with --approval-mode=yolo (docs/cli/cli-reference;
// --yolo is its deprecated spelling). YOLO only removes prompts; Gemini's own
// sandbox stays off unless configured, which is what we want inside a
// container already. --approval-mode=auto_edit would approve file edits
// only, refusing shell commands. Releases with folder trust drop an
// untrusted folder back to the default mode (refusing every tool headless)
// unless run with --skip-trust, which older releases reject: a copy of this
// description with that flag added serves them.
//
// The output format, JSON Lines of init, message, tool_use, tool_result,
// error and result events, comes from docs/cli/headless.md and
// packages/core/src/output/types.ts; see geminiEvent.
//
// Request fields Gemini CLI has no flag for are left out: AllowedTools (in
// YOLO mode every tool is allowed anyway), MaxTurns (a settings.json key,
// model.maxSessionTurns), AppendSystemPrompt and MCPConfig (Gemini reads MCP
// servers from its settings.json).
func Gemini() CLI {
	return CLI{
		Name:  "gemini",
		Flags: []string{"--output-format=stream-json", "--approval-mode=yolo"},
		Model: flagValue("--model"),
		// --resume also takes "latest" or an index; mesh-exec only stores
		// the ids (UUIDs, the init event's session_id) Gemini printed.
		Resume:  flagValue("--resume"),
		Prompt:  flagValue("--prompt"),
		Session: uuidPattern, SessionShape: "a UUID",
		NewDecoder: func() Decoder { return &geminiDecoder{calls: map[string]geminiCall{}} },
		NoEnd: func(exit int) string {
			msg := fmt.Sprintf("gemini exited with code %d without a result", exit)
			if m, ok := geminiExitMeanings[exit]; ok {
				msg += " (" + m + ")"
			}
			return msg
		},
		// Gemini CLI's messages: "Invalid session identifier" / "No
		// previous sessions found" for --resume, and the "Please set an Auth
		// method ..." it prints without credentials.
		Rules: []Rule{
			{Messages: []string{"invalid session identifier", "no previous sessions found", "session not found", "error resuming session"}, Err: backend.ErrSessionNotFound},
			{Messages: []string{"auth method", "gemini_api_key", "not authenticated", "login required"}, Err: backend.ErrNotLoggedIn},
		},
	}
}

// geminiExitMeanings are the documented headless exit codes
// (docs/cli/headless.md).
var geminiExitMeanings = map[int]string{42: "input error", 53: "turn limit exceeded"}

// The events of `gemini --output-format stream-json`, as documented in
// docs/cli/headless.md and typed in packages/core/src/output/types.ts
// (github.com/google-gemini/gemini-cli):
//
//	{"type":"init","timestamp":"...","session_id":"<uuid>","model":"gemini-2.5-pro"}
//	{"type":"message","timestamp":"...","role":"user"|"assistant","content":"...","delta":true}
//	{"type":"tool_use","timestamp":"...","tool_name":"replace","tool_id":"...","parameters":{...}}
//	{"type":"tool_result","timestamp":"...","tool_id":"...","status":"success"|"error","output":"...","error":{"type":"...","message":"..."}}
//	{"type":"error","timestamp":"...","severity":"warning"|"error","message":"..."}
//	{"type":"result","timestamp":"...","status":"success"|"error","error":{...},
//	    "stats":{"total_tokens":..,"input_tokens":..,"output_tokens":..,"cached":..,"input":..,"duration_ms":..,"tool_calls":..}}
//
// Assistant messages stream as delta chunks; the answer is the assistant text
// after the last tool call (the text before it is the agent talking between
// calls). Success is the result event's status; error events are not final
// by themselves ("non-fatal warnings and system errors"). Gemini CLI reports
// tokens, not money, so CostUSD stays 0, and it does not count turns, so
// NumTurns stays 0.
type geminiEvent struct {
	Type       string           `json:"type"`
	SessionID  string           `json:"session_id"`
	Role       string           `json:"role"`
	Content    string           `json:"content"`
	ToolName   string           `json:"tool_name"`
	ToolID     string           `json:"tool_id"`
	Parameters json.RawMessage  `json:"parameters"`
	Status     string           `json:"status"`
	Output     string           `json:"output"`
	Error      *geminiErrorBody `json:"error"`
	Severity   string           `json:"severity"`
	Message    string           `json:"message"`
	Stats      *geminiStats     `json:"stats"`
}

type geminiErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type geminiStats struct {
	InputTokens  float64 `json:"input_tokens"`
	OutputTokens float64 `json:"output_tokens"`
	DurationMS   float64 `json:"duration_ms"`
}

// geminiEditTools are Gemini CLI's built-in tools that write a file, each
// with the path in parameters.file_path
// (packages/core/src/tools/tool-names.ts).
var geminiEditTools = map[string]bool{"write_file": true, "replace": true, "edit": true}

type geminiCall struct {
	name string
	path string // the file an edit tool writes, once it succeeds
}

type geminiDecoder struct {
	segment  strings.Builder // assistant text since the last tool call
	previous string          // the last non-empty segment before it
	calls    map[string]geminiCall
}

func (d *geminiDecoder) Decode(r *Run, line []byte) []backend.Event {
	var ev geminiEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return nil
	}
	switch ev.Type {
	case "init":
		return r.NameSession(ev.SessionID)
	case "message":
		if ev.Role != "assistant" || ev.Content == "" {
			return nil // the user's own prompt, echoed
		}
		if d.segment.Len() < 4<<20 {
			d.segment.WriteString(ev.Content)
		}
		r.Answer = d.answer()
		return []backend.Event{{Kind: backend.KindText, Text: ev.Content}}
	case "tool_use":
		if ev.ToolName == "" {
			return nil
		}
		if s := d.segment.String(); strings.TrimSpace(s) != "" {
			d.previous = s
		}
		d.segment.Reset()
		r.UsedTool(ev.ToolName)
		c := geminiCall{name: ev.ToolName}
		if geminiEditTools[ev.ToolName] {
			var params struct {
				FilePath string `json:"file_path"`
			}
			if json.Unmarshal(ev.Parameters, &params) == nil {
				c.path = params.FilePath
			}
		}
		if ev.ToolID != "" && len(d.calls) < 100000 {
			d.calls[ev.ToolID] = c
		}
		return []backend.Event{{Kind: backend.KindToolUse, Tool: ev.ToolName, ToolCallID: ev.ToolID, Text: string(ev.Parameters)}}
	case "tool_result":
		c := d.calls[ev.ToolID]
		delete(d.calls, ev.ToolID)
		res := backend.Event{Kind: backend.KindToolResult, Tool: c.name, ToolCallID: ev.ToolID, Text: ev.Output, IsError: ev.Status == "error"}
		if res.IsError && ev.Error != nil && ev.Error.Message != "" {
			res.Text = ev.Error.Message
		}
		if ev.Status == "success" {
			r.Wrote(c.path)
		}
		return []backend.Event{res}
	case "error":
		if ev.Severity == "warning" {
			r.Warn(ev.Message)
			return nil
		}
		return r.ReportError(ev.Message)
	case "result":
		if s := ev.Stats; s != nil {
			r.InputTokens = cliout.Tokens(s.InputTokens)
			r.OutputTokens = cliout.Tokens(s.OutputTokens)
			r.DurationMS = cliout.Tokens(s.DurationMS)
		}
		r.Ended = true
		out := backend.Event{Kind: backend.KindResult, SessionID: r.SessionID, Text: r.Answer}
		if ev.Status != "success" {
			r.Failure = cliout.FirstNonEmpty(r.LastError, "gemini reported an error")
			if ev.Error != nil && ev.Error.Message != "" {
				r.Failure = ev.Error.Message
			}
			out.Text, out.IsError = r.Failure, true
		} else {
			r.Failure = ""
		}
		return []backend.Event{out}
	}
	return nil
}

func (d *geminiDecoder) answer() string {
	if s := d.segment.String(); strings.TrimSpace(s) != "" {
		return s
	}
	return d.previous
}
