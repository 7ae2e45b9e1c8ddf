// Package agenthook puts an agent's own tool calls under the constraint
// gate, through Claude Code's hooks.
//
// mesh-exec starts the agent with settings (the --settings flag, never a
// file the agent could edit) whose hooks run `mesh-exec hook`: for
// PreToolUse it evaluates the journey's compiled constraints (pkg/gate, the
// same gate as actions) on the tool call and answers with Claude Code's
// documented deny decision and the violation messages when the call breaks
// them; for PostToolUse, PostToolUseFailure, Stop, Notification and
// PermissionRequest it only acknowledges, so that the CLI reports them in
// its stream (--include-hook-events), where mesh-exec turns them into live
// events and audit records.
//
// The policy reaches the hook through the agent's environment (PolicyEnv),
// set by mesh-exec when it starts the CLI: commands the agent runs cannot
// change the environment of the CLI that starts the hooks.
//
// The hook fails closed: any error (no policy, a policy or event that does
// not decode, a panic) exits with status 2, which Claude Code treats as a
// blocking error for PreToolUse, so the tool does not run.
//
// Two hook commands answer alike: `mesh-exec hook` compiles the policy
// from the environment for every event; mesh-exec-hook (package hookwire),
// when it is installed beside mesh-exec, asks mesh-exec serve, which
// compiled it once ([Decider]).
package agenthook

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// PolicyEnv is the environment variable that carries the Policy, as JSON,
// from mesh-exec to the agent CLI and so to its hooks.
const PolicyEnv = "MESHWORK_GATE_POLICY"

// Policy is what the hook checks tool calls against.
type Policy struct {
	// Workspace is the absolute path of the workspace root.
	Workspace string `json:"workspace"`
	// Definition is the worker's resolved definition; its constraints and
	// agent settings are compiled into the gate.
	Definition meshtype.Definition `json:"definition"`
}

// Events are the hook events mesh-exec registers, in Claude Code's names.
var Events = []string{"PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "Notification", "PermissionRequest"}

// Settings returns the JSON of Claude Code settings whose hooks run command
// (the hook program, e.g. "/usr/local/bin/mesh-exec hook") for every event
// in Events and every tool, and which deny reading the denied paths (the
// definition's denied_paths, globs rooted at workspace, an absolute path).
//
// The deny rules are for Grep and Glob: the hook checks the directory they
// search, but a search of the workspace would print a denied file's lines
// (a Grep over certs/ its keys). Claude Code applies Read deny rules to its
// Grep and Glob tools too, in every permission mode. Read rules are
// gitignore patterns; "//" roots one at the file system's root, so that it
// holds from whatever repository under the workspace the agent works in
// ("./" would root it at the working directory).
func Settings(command, workspace string, deniedPaths []string) string {
	type hook struct {
		Type    string `json:"type"`
		Command string `json:"command"`
		Timeout int    `json:"timeout"`
	}
	type matcher struct {
		Matcher string `json:"matcher,omitempty"`
		Hooks   []hook `json:"hooks"`
	}
	hooks := map[string][]matcher{}
	for _, e := range Events {
		m := matcher{Hooks: []hook{{Type: "command", Command: command, Timeout: hookTimeoutSeconds}}}
		switch e {
		case "PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest":
			m.Matcher = "*"
		}
		hooks[e] = []matcher{m}
	}
	settings := map[string]any{"hooks": hooks}
	if deny := readDenyRules(workspace, deniedPaths); len(deny) > 0 {
		settings["permissions"] = map[string]any{"deny": deny}
	}
	b, err := json.Marshal(settings)
	if err != nil {
		panic(err) // a map of strings always marshals
	}
	return string(b)
}

// readDenyRules are Claude Code Read deny rules for globs rooted at
// workspace. A glob with a parenthesis would end the rule early and is left
// to the hook.
func readDenyRules(workspace string, globs []string) []string {
	root := "/" + strings.Trim(workspace, "/")
	if root != "/" {
		root += "/"
	}
	var rules []string
	for _, g := range globs {
		if g == "" || strings.ContainsAny(g, "()") || strings.ContainsAny(workspace, "()") {
			continue
		}
		rules = append(rules, "Read(/"+root+strings.TrimPrefix(g, "/")+")")
	}
	return rules
}

// hookTimeoutSeconds is the hook's timeout in the settings: a decision takes
// milliseconds; the bound only matters if the hook hangs.
const hookTimeoutSeconds = 30

// reasonHeader starts every refusal the hook gives; the lines after it are
// "- <constraint_id>: <message>", one per violation.
const reasonHeader = "Refused by the Meshwork gate before it ran:"

// Reason is the text of a refusal: what the agent reads as the tool's error,
// and what mesh-exec reads the violations back from (ParseReason).
func Reason(vs []meshtype.Violation) string {
	var b strings.Builder
	b.WriteString(reasonHeader)
	for _, v := range vs {
		fmt.Fprintf(&b, "\n- %s: %s", v.ConstraintID, strings.ReplaceAll(v.Message, "\n", " "))
	}
	return b.String()
}

// toolUseMarker introduces the id of the tool call a decision is about, in
// the hook's answer (the refusal's last line, or the line it prints when it
// allows a call): hook events in the CLI's stream name the tool, not the
// call, and calls of one tool may be checked out of order.
const toolUseMarker = "(tool_use_id: "

// allowedText starts the line the hook prints when it allows a call.
const allowedText = "Meshwork gate: allowed"

// markToolUse is the line that names the tool call a decision is about.
func markToolUse(id string) string {
	if id == "" || strings.ContainsAny(id, ")\n") {
		return ""
	}
	return toolUseMarker + id + ")"
}

// ToolUseID reads the tool call id a hook's answer names, or "". Only the
// answer's last line names it: a refusal's lines before it quote the
// agent's own input (a path, a command), which may hold a marker that
// names another call.
func ToolUseID(answer string) string {
	answer = strings.TrimSpace(answer)
	last := answer[strings.LastIndexByte(answer, '\n')+1:]
	last = strings.TrimPrefix(last, allowedText+" ")
	rest, ok := strings.CutPrefix(last, toolUseMarker)
	if !ok {
		return ""
	}
	id, ok := strings.CutSuffix(rest, ")")
	if !ok || markToolUse(id) == "" {
		return ""
	}
	return id
}

// ParseReason reads the violations back from a Reason; ok is false when s is
// not one.
func ParseReason(s string) (vs []meshtype.Violation, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), reasonHeader)
	if !ok {
		return nil, false
	}
	for _, line := range strings.Split(rest, "\n") {
		line, found := strings.CutPrefix(strings.TrimSpace(line), "- ")
		if !found {
			continue
		}
		id, msg, _ := strings.Cut(line, ": ")
		vs = append(vs, meshtype.Violation{ConstraintID: id, Violated: true, Message: msg})
	}
	return vs, true
}
