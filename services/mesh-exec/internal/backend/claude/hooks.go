package claude

import (
	"encoding/json"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/agenthook"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Hook events in the stream (--include-hook-events): the CLI prints a
// system event hook_started when it runs a hook and hook_response when the
// hook answered, with the hook's name ("PreToolUse:Bash"), its event, its
// stdout, stderr and exit code. A hook event names the tool but not the
// tool call, so the parser pairs it with the oldest call of that tool its
// kind of hook has not answered yet: the CLI runs a call's hooks between
// its tool_use and its tool_result.

// hookResponse turns a hook_response into a normalized event.
func (p *parser) hookResponse(ev event) []backend.Event {
	_, tool, _ := strings.Cut(ev.HookName, ":")
	out := backend.Event{SessionID: ev.SessionID, Tool: tool}
	switch ev.HookEvent {
	case "PreToolUse":
		reason, denied := denial(ev)
		answer := ev.Stdout
		if denied {
			answer = reason
		}
		u := p.byID(agenthook.ToolUseID(answer))
		if u == nil || u.decided {
			u = p.pending(tool, func(u *toolUse) bool { return !u.decided })
		}
		d := backend.ToolDecision{Tool: tool, Summary: "Using " + tool, Allowed: true}
		if u != nil {
			u.decided = true
			d.ToolCallID, d.Summary = u.id, u.verb
		}
		if denied {
			d.Allowed = false
			if u != nil {
				u.ran = true // a refused call never runs, so no hook follows it
			}
			if vs, ok := agenthook.ParseReason(reason); ok {
				d.Violations = vs
			} else {
				d.Violations = []meshtype.Violation{{ConstraintID: "hook", Violated: true, Message: truncate(reason, maxEventText)}}
			}
		}
		p.decisions = append(p.decisions, d)
		out.Kind, out.ToolCallID, out.Text, out.Decision = backend.KindPreTool, d.ToolCallID, d.Summary, &d
	case "PostToolUse", "PostToolUseFailure":
		out.Kind = backend.KindPostTool
		if ev.HookEvent == "PostToolUseFailure" {
			out.Kind, out.IsError = backend.KindToolError, true
		}
		if u := p.pending(tool, func(u *toolUse) bool { return u.decided && !u.ran }); u != nil {
			u.ran = true
			out.ToolCallID, out.Text = u.id, u.verb
		}
	case "Stop":
		out.Kind, out.Text = backend.KindStop, "Finished its turn"
	case "Notification":
		out.Kind, out.Text = backend.KindNotification, truncate(strings.TrimSpace(ev.Stdout), maxEventText)
	case "PermissionRequest":
		out.Kind, out.Text = backend.KindPermissionRequest, "Asking permission to use "+tool
	default:
		return nil
	}
	return []backend.Event{out}
}

// byID returns the call with id, if any.
func (p *parser) byID(id string) *toolUse {
	if id == "" {
		return nil
	}
	for _, u := range p.uses {
		if u.id == id {
			return u
		}
	}
	return nil
}

// pending returns the oldest call of tool that want accepts.
func (p *parser) pending(tool string, want func(*toolUse) bool) *toolUse {
	for _, u := range p.uses {
		if u.name == tool && want(u) {
			return u
		}
	}
	return nil
}

// denial reports whether a PreToolUse hook refused its call, and why: by
// the documented JSON decision (permissionDecision "deny"), or by exit
// status 2 with the reason on stderr.
func denial(ev event) (string, bool) {
	var o struct {
		HookSpecificOutput struct {
			PermissionDecision       string `json:"permissionDecision"`
			PermissionDecisionReason string `json:"permissionDecisionReason"`
		} `json:"hookSpecificOutput"`
		Decision string `json:"decision"`
		Reason   string `json:"reason"`
	}
	if out := strings.TrimSpace(ev.Stdout); strings.HasPrefix(out, "{") && json.Unmarshal([]byte(out), &o) == nil {
		if o.HookSpecificOutput.PermissionDecision == "deny" {
			return o.HookSpecificOutput.PermissionDecisionReason, true
		}
		if o.Decision == "block" { // the older form of the same decision
			return o.Reason, true
		}
	}
	if ev.ExitCode != nil && *ev.ExitCode == 2 {
		return strings.TrimSpace(ev.Stderr), true
	}
	return "", false
}
