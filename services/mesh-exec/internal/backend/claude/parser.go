package claude

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// fileTools are the tools that write files, with the input field that names
// the file. Their paths make Result.FilesModified.
var fileTools = map[string]string{
	"Edit":         "file_path",
	"MultiEdit":    "file_path",
	"Write":        "file_path",
	"NotebookEdit": "notebook_path",
}

// maxEventText bounds the text of a tool_result event. Events feed progress
// notifications; a tool's full output (a whole file read) does not belong in
// one.
const maxEventText = 4 << 10

// parser turns one run's stream-json into events and a result.
type parser struct {
	initSessionID string
	result        *event // the last result event
	apiError      string // the error of the last synthetic API-error message

	tools     []string
	toolSeen  map[string]bool
	toolNames map[string]string // tool_use id -> tool name
	files     []fileUse
	failedUse map[string]bool // tool_use ids whose tool_result was an error

	repository string     // the run's repository, for verbs
	uses       []*toolUse // tool calls in order, for pairing hook events
	decisions  []backend.ToolDecision
	// hooked: the run has hooks (Request.HookSettings), so every tool
	// call that ran must have been checked by one.
	hooked   bool
	answered map[string]bool // tool_use ids that have a tool_result
}

// toolUse is one tool call, as far as its hooks have reported it.
type toolUse struct {
	id, name string
	decided  bool // its PreToolUse hook answered
	ran      bool // its PostToolUse or PostToolUseFailure hook answered
	verb     string
}

// fileUse is one call of a file-writing tool.
type fileUse struct {
	path      string
	toolUseID string
}

func newParser(repository string) *parser {
	return &parser{
		repository: repository,
		toolSeen:   map[string]bool{},
		toolNames:  map[string]string{},
		failedUse:  map[string]bool{},
		answered:   map[string]bool{},
	}
}

// Line parses one line of stream-json.
func (p *parser) Line(line []byte) []backend.Event {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	var ev event
	if !decode(line, &ev) {
		return nil
	}
	switch ev.Type {
	case "system":
		switch ev.Subtype {
		case "init":
			if p.initSessionID == "" {
				p.initSessionID = ev.SessionID
			}
			return []backend.Event{{Kind: backend.KindInit, SessionID: ev.SessionID}}
		case "hook_response":
			return p.hookResponse(ev)
		}
	case "assistant":
		return p.assistant(ev)
	case "user":
		return p.user(ev)
	case "result":
		p.result = &ev
		return []backend.Event{{Kind: backend.KindResult, SessionID: ev.SessionID, Text: resultText(ev), IsError: ev.IsError}}
	}
	return nil
}

func (p *parser) assistant(ev event) []backend.Event {
	var msg message
	if !decode(ev.Message, &msg) {
		return nil
	}
	var out []backend.Event
	apiError := stringOrNothing(ev.Error)
	if apiError != "" {
		p.apiError = apiError
	}
	for _, b := range msg.blocks() {
		switch b.Type {
		case "text":
			if ev.IsAPIErrorMessage || apiError != "" {
				// The CLI's own message about a failed API call ("Not
				// logged in · Please run /login"), not the model's words.
				out = append(out, backend.Event{Kind: backend.KindError, SessionID: ev.SessionID, Text: b.Text, IsError: true})
				continue
			}
			out = append(out, backend.Event{Kind: backend.KindText, SessionID: ev.SessionID, Text: b.Text})
		case "tool_use":
			out = append(out, p.toolUse(ev.SessionID, b))
		}
	}
	return out
}

func (p *parser) toolUse(sessionID string, b block) backend.Event {
	if b.Name != "" && !p.toolSeen[b.Name] {
		p.toolSeen[b.Name] = true
		p.tools = append(p.tools, b.Name)
	}
	if b.ID != "" {
		p.toolNames[b.ID] = b.Name
	}
	var input map[string]any
	_ = decode(b.Input, &input)
	// The input itself is not kept: a Write's may be megabytes, and only
	// what the call does, said briefly, is reported.
	p.uses = append(p.uses, &toolUse{id: b.ID, name: b.Name, verb: backend.ToolVerb(b.Name, input, p.repository)})
	var detail string
	if field, ok := fileTools[b.Name]; ok {
		if path := b.inputString(field); path != "" {
			p.files = append(p.files, fileUse{path: path, toolUseID: b.ID})
			detail = path
		}
	} else if cmd := b.inputString("command"); cmd != "" {
		detail = cmd
	}
	return backend.Event{Kind: backend.KindToolUse, SessionID: sessionID, Tool: b.Name, ToolCallID: b.ID, Text: detail}
}

func (p *parser) user(ev event) []backend.Event {
	var msg message
	if !decode(ev.Message, &msg) {
		return nil
	}
	var out []backend.Event
	for _, b := range msg.blocks() {
		if b.Type != "tool_result" {
			continue
		}
		if b.IsError && b.ToolUseID != "" {
			p.failedUse[b.ToolUseID] = true
		}
		if b.ToolUseID != "" && len(p.answered) < maxAnswered {
			p.answered[b.ToolUseID] = true
		}
		out = append(out, backend.Event{
			Kind:       backend.KindToolResult,
			SessionID:  ev.SessionID,
			Tool:       p.toolNames[b.ToolUseID],
			ToolCallID: b.ToolUseID,
			Text:       truncate(b.text(), maxEventText),
			IsError:    b.IsError,
		})
	}
	return out
}

// denied marks the decisions of the calls the CLI's own permission rules
// refused after the hook allowed them (agent.allowed_tools, the permission
// mode): the call did not run, and its audit says so.
func denied(decisions []backend.ToolDecision, ids map[string]bool) {
	for i := range decisions {
		d := &decisions[i]
		if d.Allowed && d.ToolCallID != "" && ids[d.ToolCallID] {
			d.Allowed = false
			d.Violations = append(d.Violations, meshtype.Violation{
				ConstraintID: ConstraintAgentPermissions, Violated: true,
				Message: d.Tool + " was refused by the agent's own permission rules (agent.allowed_tools)",
			})
		}
	}
}

// ConstraintAgentPermissions is the violation of a tool call the gate
// allowed and the agent CLI's own permission rules refused.
const ConstraintAgentPermissions = "agent_permissions"

// Finish returns the run's result; see outcome.go for how failures are told
// apart.
func (p *parser) Finish(exitCode int, stderr string) backend.Result {
	res := backend.Result{
		SessionID:     p.initSessionID,
		ToolsUsed:     append([]string(nil), p.tools...),
		FilesModified: p.modified(),
		ToolDecisions: append([]backend.ToolDecision(nil), p.decisions...),
	}
	if r := p.result; r != nil {
		if r.SessionID != "" {
			res.SessionID = r.SessionID
		}
		res.CostUSD = r.TotalCostUSD
		res.DurationMS = r.DurationMS
		denied(res.ToolDecisions, r.deniedCalls())
		res.NumTurns = r.NumTurns
		// Every input token, cached or not, as OpenTelemetry's
		// gen_ai.usage.input_tokens counts them.
		// The counts are the agent's (untrusted): their sum saturates.
		u := r.Usage
		for _, n := range []int64{u.InputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens} {
			if n > 0 {
				res.InputTokens += min(n, math.MaxInt64-res.InputTokens)
			}
		}
		res.OutputTokens = r.Usage.OutputTokens
	}
	res.Output, res.IsError, res.Err = p.outcome(exitCode, stderr)
	p.unchecked(&res)
	return res
}

// maxAnswered bounds the tool results remembered for unchecked.
const maxAnswered = 1 << 16

// ConstraintUnchecked is the violation of a tool call that ran without the
// gate's check.
const ConstraintUnchecked = "unchecked"

// unchecked fails a run in which tool calls ran that no hook checked: the
// CLI ignores settings it finds invalid in print mode, hooks and all, and
// then nothing stood between the agent and its tools. Calls the CLI's own
// permission rules refused did not run; a run cut short (no result) may
// have calls its hooks had not answered yet.
func (p *parser) unchecked(res *backend.Result) {
	if !p.hooked || p.result == nil {
		return
	}
	refused := p.result.deniedCalls()
	var names []string
	for _, u := range p.uses {
		if u.decided || refused[u.id] || !p.answered[u.id] {
			continue
		}
		names = append(names, u.name)
		res.ToolDecisions = append(res.ToolDecisions, backend.ToolDecision{
			ToolCallID: u.id, Tool: u.name, Summary: u.verb,
			Violations: []meshtype.Violation{{ConstraintID: ConstraintUnchecked, Violated: true, Message: u.name + " ran without the gate's check"}},
		})
	}
	if len(names) == 0 {
		return
	}
	res.IsError = true
	res.Output = fmt.Sprintf("%d tool call(s) ran without the gate's check (%s): the agent CLI did not run the hooks in its settings, so this run's changes were not checked\n\n%s",
		len(names), strings.Join(names, ", "), res.Output)
}

// modified returns the paths of file-writing tool calls that did not fail,
// distinct, in order. A call with no tool_result yet (the run was stopped
// mid-call) counts: the file may well have changed.
func (p *parser) modified() []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range p.files {
		if p.failedUse[f.toolUseID] || seen[f.path] {
			continue
		}
		seen[f.path] = true
		out = append(out, f.path)
	}
	return out
}

// truncate cuts s to at most max bytes, marking the cut.
func truncate(s string, max int) string { return textcut.Clip(s, max, "…[truncated]") }
