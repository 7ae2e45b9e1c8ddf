package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

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
type event struct {
	Type       string          `json:"type"`
	SessionID  string          `json:"session_id"`
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"`
	Status     string          `json:"status"`
	Output     string          `json:"output"`
	Error      *errorBody      `json:"error"`
	Severity   string          `json:"severity"`
	Message    string          `json:"message"`
	Stats      *stats          `json:"stats"`
}

type errorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type stats struct {
	InputTokens  float64 `json:"input_tokens"`
	OutputTokens float64 `json:"output_tokens"`
	DurationMS   float64 `json:"duration_ms"`
}

// editTools are Gemini CLI's built-in tools that write a file, each with the
// path in parameters.file_path (packages/core/src/tools/tool-names.ts).
var editTools = map[string]bool{"write_file": true, "replace": true, "edit": true}

type call struct {
	name string
	path string // the file an edit tool writes, once it succeeds
}

type parser struct {
	sessionID string
	segment   strings.Builder // assistant text since the last tool call
	previous  string          // the last non-empty segment before it
	calls     map[string]call
	tools     []string
	files     []string
	result    *event
	lastError string
	warning   string
}

func newParser(req backend.Request) *parser {
	// A resumed run keeps its id even when Gemini fails before init.
	return &parser{sessionID: req.SessionID, calls: map[string]call{}}
}

// Line parses one line of `gemini --output-format stream-json`.
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
	case "init":
		if ev.SessionID == "" {
			return nil
		}
		p.sessionID = ev.SessionID
		return []backend.Event{{Kind: backend.KindInit, SessionID: ev.SessionID}}
	case "message":
		if ev.Role != "assistant" || ev.Content == "" {
			return nil // the user's own prompt, echoed
		}
		if p.segment.Len() < 4<<20 {
			p.segment.WriteString(ev.Content)
		}
		return []backend.Event{{Kind: backend.KindText, Text: ev.Content}}
	case "tool_use":
		if ev.ToolName == "" {
			return nil
		}
		if s := p.segment.String(); strings.TrimSpace(s) != "" {
			p.previous = s
		}
		p.segment.Reset()
		p.tools = cliout.AppendDistinct(p.tools, ev.ToolName)
		c := call{name: ev.ToolName}
		if editTools[ev.ToolName] {
			var params struct {
				FilePath string `json:"file_path"`
			}
			if json.Unmarshal(ev.Parameters, &params) == nil {
				c.path = params.FilePath
			}
		}
		if ev.ToolID != "" && len(p.calls) < 100000 {
			p.calls[ev.ToolID] = c
		}
		return []backend.Event{{Kind: backend.KindToolUse, Tool: ev.ToolName, ToolCallID: ev.ToolID, Text: string(ev.Parameters)}}
	case "tool_result":
		c := p.calls[ev.ToolID]
		delete(p.calls, ev.ToolID)
		res := backend.Event{Kind: backend.KindToolResult, Tool: c.name, ToolCallID: ev.ToolID, Text: ev.Output, IsError: ev.Status == "error"}
		if res.IsError && ev.Error != nil && ev.Error.Message != "" {
			res.Text = ev.Error.Message
		}
		if ev.Status == "success" && c.path != "" {
			p.files = cliout.AppendDistinct(p.files, c.path)
		}
		return []backend.Event{res}
	case "error":
		if ev.Message == "" {
			return nil
		}
		if ev.Severity == "warning" {
			p.warning = ev.Message
			return nil
		}
		p.lastError = ev.Message
		return []backend.Event{{Kind: backend.KindError, Text: ev.Message, IsError: true}}
	case "result":
		p.result = &ev
		out := backend.Event{Kind: backend.KindResult, SessionID: p.sessionID, IsError: ev.Status != "success"}
		if out.IsError {
			out.Text = p.failure()
		} else {
			out.Text = p.answer()
		}
		return []backend.Event{out}
	}
	return nil
}

func (p *parser) answer() string {
	if s := p.segment.String(); strings.TrimSpace(s) != "" {
		return s
	}
	return p.previous
}

// failure is the clearest message of a failed result event.
func (p *parser) failure() string {
	if p.result != nil && p.result.Error != nil && p.result.Error.Message != "" {
		return p.result.Error.Message
	}
	return cliout.FirstNonEmpty(p.lastError, "gemini reported an error")
}

// exitMeanings are the documented headless exit codes (docs/cli/headless.md).
var exitMeanings = map[int]string{42: "input error", 53: "turn limit exceeded"}

// Finish returns the run's result.
func (p *parser) Finish(exitCode int, stderr string) backend.Result {
	res := backend.Result{
		SessionID:     p.sessionID,
		ToolsUsed:     p.tools,
		FilesModified: p.files,
	}
	if p.result != nil {
		if s := p.result.Stats; s != nil {
			res.InputTokens = cliout.Tokens(s.InputTokens)
			res.OutputTokens = cliout.Tokens(s.OutputTokens)
			res.DurationMS = cliout.Tokens(s.DurationMS)
		}
		if p.result.Status == "success" {
			res.Output = p.answer()
			return res
		}
		res.IsError = true
		res.Output = p.failure()
	} else {
		// No result event: Gemini stopped before the end (bad arguments, no
		// credentials, an unknown session, a crash).
		res.IsError = true
		msg := fmt.Sprintf("gemini exited with code %d without a result", exitCode)
		if m, ok := exitMeanings[exitCode]; ok {
			msg += " (" + m + ")"
		}
		res.Output = cliout.FirstNonEmpty(p.lastError, cliout.StderrTail(stderr), p.warning, msg)
	}
	res.Err = classify(res.Output + "\n" + stderr)
	return res
}

// classify maps Gemini CLI's messages to the errors callers branch on: its
// "Invalid session identifier" / "No previous sessions found" for --resume,
// and the "Please set an Auth method ..." it prints without credentials.
func classify(msg string) error {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "invalid session identifier"), strings.Contains(m, "no previous sessions found"),
		strings.Contains(m, "session not found"), strings.Contains(m, "error resuming session"):
		return backend.ErrSessionNotFound
	case strings.Contains(m, "auth method"), strings.Contains(m, "gemini_api_key"),
		strings.Contains(m, "not authenticated"), strings.Contains(m, "login required"):
		return backend.ErrNotLoggedIn
	}
	return nil
}
