package opencode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

// The events of `opencode run --format json`, from the emit() calls in
// packages/opencode/src/cli/cmd/run.ts: every line is
// {"type", "timestamp", "sessionID", ...payload}, the payload a message part
// of packages/opencode/src/session/message-v2.ts:
//
//	{"type":"step_start","sessionID":"ses_...","part":{"type":"step-start",...}}
//	{"type":"text","sessionID":"ses_...","part":{"type":"text","text":"...","time":{"start":..,"end":..}}}
//	{"type":"tool_use","sessionID":"ses_...","part":{"type":"tool","tool":"edit","callID":"...",
//	    "state":{"status":"completed"|"error","input":{...},"output":"...","error":"...","title":"..."}}}
//	{"type":"step_finish","sessionID":"ses_...","part":{"type":"step-finish","reason":"stop"|"tool-calls",
//	    "cost":0.0123,"tokens":{"input":..,"output":..,"reasoning":..,"cache":{"read":..,"write":..}}}}
//	{"type":"error","sessionID":"ses_...","error":{"name":"ProviderAuthError","data":{"message":"..."}}}
//	{"type":"done","sessionID":"ses_...","reason":"idle","rejected":[]}   (recent releases)
//
// A step is one model call; a tool call arrives as one tool_use event once it
// completed or failed, carrying both its input and its result. The answer is
// the text of the last step that had any: earlier steps' text is the agent
// talking between tool calls.
//
// Success: OpenCode signals failure with an error event and exit code 1
// (run.ts sets process.exitCode when the session reported an error). A run
// without either that got at least to the end of a step is a success.
type event struct {
	Type      string          `json:"type"`
	SessionID string          `json:"sessionID"`
	Part      *part           `json:"part"`
	Error     json.RawMessage `json:"error"`
	Reason    string          `json:"reason"`
}

type part struct {
	Type   string     `json:"type"`
	Text   string     `json:"text"`
	Tool   string     `json:"tool"`
	CallID string     `json:"callID"`
	State  *toolState `json:"state"`
	Reason string     `json:"reason"`
	Cost   float64    `json:"cost"`
	Tokens *struct {
		Input  float64 `json:"input"`
		Output float64 `json:"output"`
	} `json:"tokens"`
}

type toolState struct {
	Status string                     `json:"status"`
	Input  map[string]json.RawMessage `json:"input"`
	Output string                     `json:"output"`
	Error  string                     `json:"error"`
	Title  string                     `json:"title"`
}

// editTools are OpenCode's built-in tools that write files, each with the
// path in input.filePath.
var editTools = map[string]bool{"write": true, "edit": true, "multiedit": true, "patch": true}

type parser struct {
	sessionID string
	announced bool
	step      []string // text of the current step
	answer    string   // text of the last step that had any
	tools     []string
	files     []string
	cost      float64
	in, out   int64
	steps     int
	done      bool
	errors    []string
	errName   string
}

func newParser(req backend.Request) *parser {
	// A resumed run keeps its id even when OpenCode fails before any event.
	return &parser{sessionID: req.SessionID}
}

// Line parses one line of `opencode run --format json`.
func (p *parser) Line(line []byte) []backend.Event {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	var ev event
	if err := json.Unmarshal(line, &ev); err != nil {
		return nil
	}
	var out []backend.Event
	if ev.SessionID != "" && (!p.announced || ev.SessionID != p.sessionID) {
		// Every event names the session; the first one is the init.
		p.sessionID, p.announced = ev.SessionID, true
		out = append(out, backend.Event{Kind: backend.KindInit, SessionID: ev.SessionID})
	}
	switch ev.Type {
	case "step_start":
		p.step = p.step[:0]
	case "text":
		if ev.Part == nil || ev.Part.Text == "" {
			break
		}
		p.step = append(p.step, ev.Part.Text)
		out = append(out, backend.Event{Kind: backend.KindText, Text: ev.Part.Text})
	case "tool_use":
		if ev.Part == nil || ev.Part.Tool == "" {
			break
		}
		out = append(out, p.tool(ev.Part)...)
	case "step_finish":
		p.steps++
		p.done = true
		if len(p.step) > 0 {
			p.answer = strings.Join(p.step, "\n")
			p.step = p.step[:0]
		}
		if ev.Part != nil {
			if ev.Part.Cost > 0 && ev.Part.Cost < 1e6 {
				p.cost += ev.Part.Cost
			}
			if t := ev.Part.Tokens; t != nil {
				p.in += cliout.Tokens(t.Input)
				p.out += cliout.Tokens(t.Output)
			}
		}
	case "error":
		name, msg := errorText(ev.Error)
		if msg == "" {
			break
		}
		p.errors = append(p.errors, msg)
		if name != "" {
			p.errName = name
		}
		out = append(out, backend.Event{Kind: backend.KindError, Text: msg, IsError: true})
	case "done":
		p.done = true
		out = append(out, backend.Event{Kind: backend.KindResult, SessionID: p.sessionID, Text: p.finalText()})
	}
	return out
}

func (p *parser) tool(pt *part) []backend.Event {
	p.tools = cliout.AppendDistinct(p.tools, pt.Tool)
	st := pt.State
	if st == nil {
		st = &toolState{}
	}
	use := backend.Event{Kind: backend.KindToolUse, Tool: pt.Tool, ToolCallID: pt.CallID, Text: st.Title}
	if use.Text == "" && len(st.Input) > 0 {
		if b, err := json.Marshal(st.Input); err == nil {
			use.Text = string(b)
		}
	}
	res := backend.Event{Kind: backend.KindToolResult, Tool: pt.Tool, ToolCallID: pt.CallID, Text: st.Output}
	if st.Status == "error" {
		res.Text, res.IsError = cliout.FirstNonEmpty(st.Error, st.Output, "the tool failed"), true
	}
	if st.Status == "completed" && editTools[pt.Tool] {
		var path string
		if raw, ok := st.Input["filePath"]; ok && json.Unmarshal(raw, &path) == nil && path != "" {
			p.files = cliout.AppendDistinct(p.files, path)
		}
	}
	return []backend.Event{use, res}
}

// errorText reads OpenCode's error payload: a named error with
// data.message (ProviderAuthError, APIError, UnknownError, ...), and, to be
// lenient, a plain message or a string.
func errorText(raw json.RawMessage) (name, msg string) {
	if len(raw) == 0 {
		return "", ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return "", s
	}
	var e struct {
		Name    string `json:"name"`
		Message string `json:"message"`
		Data    struct {
			Message string `json:"message"`
		} `json:"data"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return "", ""
	}
	return e.Name, cliout.FirstNonEmpty(e.Data.Message, e.Message, e.Name)
}

func (p *parser) finalText() string {
	if len(p.step) > 0 {
		// Text after the last step_finish: a run cut short mid-step.
		return strings.Join(p.step, "\n")
	}
	return p.answer
}

// Finish returns the run's result.
func (p *parser) Finish(exitCode int, stderr string) backend.Result {
	res := backend.Result{
		SessionID:     p.sessionID,
		CostUSD:       p.cost,
		NumTurns:      p.steps,
		InputTokens:   p.in,
		OutputTokens:  p.out,
		ToolsUsed:     p.tools,
		FilesModified: p.files,
		Output:        p.finalText(),
	}
	if len(p.errors) == 0 && exitCode == 0 && p.done {
		return res
	}
	res.IsError = true
	switch {
	case len(p.errors) > 0:
		res.Output = strings.Join(p.errors, "\n")
	case exitCode != 0:
		res.Output = cliout.FirstNonEmpty(cliout.StderrTail(stderr), fmt.Sprintf("opencode exited with code %d", exitCode))
	default:
		res.Output = cliout.FirstNonEmpty(cliout.StderrTail(stderr), "opencode finished without completing a step")
	}
	res.Err = classify(p.errName, res.Output+"\n"+stderr)
	return res
}

// classify maps OpenCode's errors to the ones callers branch on: a
// ProviderAuthError event for missing or refused credentials, and run.ts's
// "Session not found" (printed to stderr, exit 1) for an unknown --session.
func classify(name, msg string) error {
	m := strings.ToLower(msg)
	switch {
	case name == "ProviderAuthError":
		return backend.ErrNotLoggedIn
	case strings.Contains(m, "session not found"):
		return backend.ErrSessionNotFound
	}
	return nil
}
