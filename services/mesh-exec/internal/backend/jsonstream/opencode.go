package jsonstream

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

// OpenCode describes OpenCode (github.com/anomalyco/opencode, formerly
// sst/opencode), run headless as
//
//	opencode run --format json --auto [--model=provider/model] [--session=ses_...] -- TASK
//
// --session continues an existing session; without it `opencode run` creates
// one and reports its id as sessionID on every event. The `--` keeps a task
// that starts with "-" from being read as a flag (run.ts appends the words
// after `--` to the message). run.ts joins the message words with spaces and
// wraps a word that contains a space in double quotes, so the model sees a
// multi-word task quoted; every caller that passes the task as one argument
// gets that, and it does not change the task's meaning.
//
// Permissions: a non-interactive `opencode run` rejects every permission
// request ("permission requested: ...; auto-rejecting") unless told to
// approve them (anomalyco/opencode#41513). mesh-exec runs the agent inside an
// isolated container, so the run approves what the agent's configuration
// does not explicitly deny. The flag for that changed across releases:
// --auto in current releases ("auto-approve permissions that are not
// explicitly denied"), --dangerously-skip-permissions before 1.18
// (anomalyco/opencode#21266), and none at all before that: a copy of this
// description with other Flags serves those releases.
//
// The output format, one JSON object per line with type, timestamp,
// sessionID and a payload, comes from packages/opencode/src/cli/cmd/run.ts
// (the emit() calls); see opencodeEvent.
//
// Request fields OpenCode has no `run` flag for are left out: AllowedTools,
// MaxTurns, AppendSystemPrompt and MCPConfig (OpenCode reads MCP servers and
// permissions from its own opencode.json).
func OpenCode() CLI {
	return CLI{
		Name:   "opencode",
		Flags:  []string{"run", "--format", "json", "--auto"},
		Model:  flagValue("--model"),
		Resume: flagValue("--session"),
		Prompt: afterDashes,
		// "ses_" and an ascending identifier of letters and digits
		// (ses_494719016ffe85dkDMj0FPRbHK).
		Session: regexp.MustCompile(`^ses_[0-9A-Za-z]{1,64}$`), SessionShape: `"ses_" and letters or digits`,
		Check: func(req backend.Request) error {
			if req.Model == "" {
				return nil
			}
			// OpenCode splits the model at the first "/" into provider and
			// model; without one it fails later with a less helpful message.
			provider, model, ok := strings.Cut(req.Model, "/")
			if !ok || provider == "" || model == "" {
				return fmt.Errorf("model %q is not of the form provider/model", req.Model)
			}
			return nil
		},
		NewDecoder: func() Decoder { return &opencodeDecoder{} },
		// run.ts sets process.exitCode when the session reported an error.
		ExitCodeCounts: true,
		NoEnd: func(exit int) string {
			if exit != 0 {
				return fmt.Sprintf("opencode exited with code %d", exit)
			}
			return "opencode finished without completing a step"
		},
		// A ProviderAuthError event for missing or refused credentials, and
		// run.ts's "Session not found" (printed to stderr, exit 1) for an
		// unknown --session.
		Rules: []Rule{
			{ErrorName: "ProviderAuthError", Err: backend.ErrNotLoggedIn},
			{Messages: []string{"session not found"}, Err: backend.ErrSessionNotFound},
		},
	}
}

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
type opencodeEvent struct {
	Type      string          `json:"type"`
	SessionID string          `json:"sessionID"`
	Part      *opencodePart   `json:"part"`
	Error     json.RawMessage `json:"error"`
	Reason    string          `json:"reason"`
}

type opencodePart struct {
	Type   string             `json:"type"`
	Text   string             `json:"text"`
	Tool   string             `json:"tool"`
	CallID string             `json:"callID"`
	State  *opencodeToolState `json:"state"`
	Reason string             `json:"reason"`
	Cost   float64            `json:"cost"`
	Tokens *struct {
		Input  float64 `json:"input"`
		Output float64 `json:"output"`
	} `json:"tokens"`
}

type opencodeToolState struct {
	Status string                     `json:"status"`
	Input  map[string]json.RawMessage `json:"input"`
	Output string                     `json:"output"`
	Error  string                     `json:"error"`
	Title  string                     `json:"title"`
}

// opencodeEditTools are OpenCode's built-in tools that write files, each
// with the path in input.filePath.
var opencodeEditTools = map[string]bool{"write": true, "edit": true, "multiedit": true, "patch": true}

type opencodeDecoder struct {
	step      []string // text of the current step
	stepBytes int      // the length of step's texts together
	answer    string   // text of the last step that had any
	errors    []string
}

func (d *opencodeDecoder) Decode(r *Run, line []byte) []backend.Event {
	var ev opencodeEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return nil
	}
	// Every event names the session; the first one is the init.
	out := r.NameSession(ev.SessionID)
	switch ev.Type {
	case "step_start":
		d.step, d.stepBytes = d.step[:0], 0
	case "text":
		if ev.Part == nil || ev.Part.Text == "" {
			break
		}
		d.step = append(d.step, ev.Part.Text)
		d.stepBytes += len(ev.Part.Text)
		// Bounded, keeping the end: the conclusion comes last.
		for len(d.step) > 1 && (len(d.step) > maxStepParts || d.stepBytes > maxStepBytes) {
			d.stepBytes -= len(d.step[0])
			d.step = slices.Delete(d.step, 0, 1)
		}
		out = append(out, backend.Event{Kind: backend.KindText, Text: ev.Part.Text})
	case "tool_use":
		if ev.Part == nil || ev.Part.Tool == "" {
			break
		}
		out = append(out, opencodeTool(r, ev.Part)...)
	case "step_finish":
		r.Turns++
		r.Ended = true
		if len(d.step) > 0 {
			d.answer = strings.Join(d.step, "\n")
			d.step, d.stepBytes = d.step[:0], 0
		}
		if ev.Part != nil {
			r.AddCost(ev.Part.Cost)
			if t := ev.Part.Tokens; t != nil {
				r.InputTokens += cliout.Tokens(t.Input)
				r.OutputTokens += cliout.Tokens(t.Output)
			}
		}
	case "error":
		name, msg := opencodeErrorText(ev.Error)
		if msg == "" {
			break
		}
		msg = textcut.Clip(msg, maxErrorText, "…")
		if len(d.errors) < maxErrors {
			d.errors = append(d.errors, msg)
		}
		r.Failed = true // the errors are joined once, in Finish
		if name != "" {
			r.ErrorName = name
		}
		out = append(out, backend.Event{Kind: backend.KindError, Text: msg, IsError: true})
	case "done":
		r.Ended = true
		out = append(out, backend.Event{Kind: backend.KindResult, SessionID: r.SessionID, Text: d.finalText()})
	}
	return out
}

// Bounds on what the decoder keeps of the CLI's output: the text parts of
// a step (their number and their bytes together) for the answer, and the
// errors it reported.
const (
	maxStepParts = 10000
	maxStepBytes = 4 << 20
	maxErrors    = 100
	maxErrorText = 4 << 10
)

// Finish sets the answer, from the parts kept, and the failure, from the
// errors kept (each joined once, here).
func (d *opencodeDecoder) Finish(r *Run) {
	r.Answer = d.finalText()
	if len(d.errors) > 0 {
		r.Failure = strings.Join(d.errors, "\n")
	}
}

// finalText is the answer: the last step's text, or the text after the last
// step_finish of a run cut short mid-step.
func (d *opencodeDecoder) finalText() string {
	if len(d.step) > 0 {
		return strings.Join(d.step, "\n")
	}
	return d.answer
}

func opencodeTool(r *Run, pt *opencodePart) []backend.Event {
	r.UsedTool(pt.Tool)
	st := pt.State
	if st == nil {
		st = &opencodeToolState{}
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
	if st.Status == "completed" && opencodeEditTools[pt.Tool] {
		var path string
		if raw, ok := st.Input["filePath"]; ok && json.Unmarshal(raw, &path) == nil {
			r.Wrote(path)
		}
	}
	return []backend.Event{use, res}
}

// opencodeErrorText reads OpenCode's error payload: a named error with
// data.message (ProviderAuthError, APIError, UnknownError, ...), and, to be
// lenient, a plain message or a string.
func opencodeErrorText(raw json.RawMessage) (name, msg string) {
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
