package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// Hooks, as Claude Code documents them: settings (--settings, a file or a
// JSON string) hold "hooks": {EventName: [{"matcher", "hooks": [{"type":
// "command", "command", "timeout"}]}]}. The fake runs command hooks for
// PreToolUse, PostToolUse, PostToolUseFailure (matched on the tool's name:
// "*", "" or a regular expression), Stop and Notification. A command runs
// through a shell (the fake's is mvdan.cc/sh's interpreter, so it works in a
// scratch image) in the cwd, with the event as JSON on stdin and
// CLAUDE_PROJECT_DIR set. Exit 0: stdout may hold a JSON decision; exit 2:
// a blocking error, stderr is the reason; any other status: a non-blocking
// error, the tool runs. For PreToolUse, permissionDecision "deny" (or "ask",
// which nobody can answer in -p) and the older "decision": "block" refuse the
// call: the tool does not run, and its tool_result is an error holding the
// reason. With --include-hook-events every hook run is printed as a system
// hook_started and hook_response event.

// hookCommand is one command hook of the settings.
type hookCommand struct {
	Type    string `json:"type"`
	Command string `json:"command"`
	Timeout int    `json:"timeout"`
}

type hookMatcher struct {
	Matcher string        `json:"matcher"`
	Hooks   []hookCommand `json:"hooks"`
}

// loadHooks reads the hooks of every --settings value.
func loadHooks(values []string) (map[string][]hookMatcher, error) {
	hooks := map[string][]hookMatcher{}
	for _, v := range values {
		data, err := jsonValue(v)
		if err != nil {
			return nil, fmt.Errorf("Settings file not found: %s", v)
		}
		var s struct {
			Hooks map[string][]hookMatcher `json:"hooks"`
		}
		if err := json.Unmarshal(data, &s); err != nil {
			return nil, fmt.Errorf("Invalid settings JSON in %s: %v", v, err)
		}
		for event, ms := range s.Hooks {
			for _, m := range ms {
				if _, err := regexp.Compile(m.Matcher); err != nil && m.Matcher != "*" {
					return nil, fmt.Errorf("hooks.%s: invalid matcher %q", event, m.Matcher)
				}
			}
			hooks[event] = append(hooks[event], ms...)
		}
	}
	return hooks, nil
}

// matches is the CLI's matcher rule: "*" or empty matches every tool, a
// plain name matches that tool, anything else is a regular expression.
func matches(matcher, tool string) bool {
	if matcher == "" || matcher == "*" || matcher == tool {
		return true
	}
	re, err := regexp.Compile("^(?:" + matcher + ")$")
	return err == nil && re.MatchString(tool)
}

// hookRun is what one command hook did.
type hookRun struct {
	stdout, stderr string
	exitCode       int
	timedOut       bool
}

// hookVerdict is what the hooks of one event decided.
type hookVerdict struct {
	blocked bool
	reason  string
}

// runHooks runs the hooks of an event (for tool events, those matching
// tool) with fields added to the common input, and returns their verdict.
func (t *turn) runHooks(event, tool string, fields map[string]any) hookVerdict {
	var v hookVerdict
	in := map[string]any{
		"session_id": t.sessionID, "transcript_path": t.transcript, "cwd": t.cwd,
		"permission_mode": permissionMode(t.o.permissionMode), "hook_event_name": event,
	}
	for k, x := range fields {
		in[k] = x
	}
	stdin, _ := json.Marshal(in)
	name := event
	if tool != "" {
		name = event + ":" + tool
	}
	for _, m := range t.hooks[event] {
		if tool != "" && !matches(m.Matcher, tool) {
			continue
		}
		for _, h := range m.Hooks {
			if h.Type != "command" {
				continue
			}
			id := uuid.NewString()
			if t.o.includeHookEvents {
				t.out.event(map[string]any{"type": "system", "subtype": "hook_started", "hook_id": id, "hook_name": name,
					"hook_event": event, "uuid": uuid.NewString(), "session_id": t.sessionID})
			}
			r := t.runHook(h, stdin)
			outcome := "success"
			if r.exitCode != 0 || r.timedOut {
				outcome = "error"
			}
			if t.o.includeHookEvents {
				t.out.event(map[string]any{"type": "system", "subtype": "hook_response", "hook_id": id, "hook_name": name,
					"hook_event": event, "output": r.stdout + r.stderr, "stdout": r.stdout, "stderr": r.stderr,
					"exit_code": r.exitCode, "outcome": outcome, "uuid": uuid.NewString(), "session_id": t.sessionID})
			}
			if v.blocked {
				continue
			}
			switch {
			case r.timedOut:
			case r.exitCode == 2:
				v = hookVerdict{blocked: true, reason: strings.TrimSpace(r.stderr)}
			case r.exitCode == 0:
				if reason, deny := jsonDenial(r.stdout); deny {
					v = hookVerdict{blocked: true, reason: reason}
				}
			}
		}
	}
	return v
}

// jsonDenial reads a PreToolUse JSON decision from a hook's stdout.
func jsonDenial(stdout string) (string, bool) {
	s := strings.TrimSpace(stdout)
	if !strings.HasPrefix(s, "{") {
		return "", false
	}
	var o struct {
		Decision           string `json:"decision"`
		Reason             string `json:"reason"`
		HookSpecificOutput struct {
			PermissionDecision       string `json:"permissionDecision"`
			PermissionDecisionReason string `json:"permissionDecisionReason"`
		} `json:"hookSpecificOutput"`
	}
	if json.Unmarshal([]byte(s), &o) != nil {
		return "", false
	}
	switch {
	case o.HookSpecificOutput.PermissionDecision == "deny", o.HookSpecificOutput.PermissionDecision == "ask":
		return o.HookSpecificOutput.PermissionDecisionReason, true
	case o.Decision == "block":
		return o.Reason, true
	}
	return "", false
}

// runHook runs one command hook through a shell.
func (t *turn) runHook(h hookCommand, stdin []byte) hookRun {
	timeout := 60 * time.Second
	if h.Timeout > 0 {
		timeout = time.Duration(h.Timeout) * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code, err := runShell(ctx, h.Command, t.cwd, bytes.NewReader(stdin), &stdout, &stderr,
		append(os.Environ(), "CLAUDE_PROJECT_DIR="+t.cwd))
	r := hookRun{stdout: stdout.String(), stderr: stderr.String(), exitCode: code}
	if ctx.Err() != nil {
		r.timedOut, r.exitCode = true, 1
		r.stderr += fmt.Sprintf("Hook command timed out after %s", timeout)
	} else if err != nil {
		r.stderr += err.Error()
	}
	return r
}

// runShell runs a script with mvdan.cc/sh's interpreter and returns its
// exit status.
func runShell(ctx context.Context, script, dir string, stdin *bytes.Reader, stdout, stderr *bytes.Buffer, env []string) (int, error) {
	f, err := syntax.NewParser().Parse(strings.NewReader(script), "")
	if err != nil {
		return 2, err
	}
	r, err := interp.New(interp.Dir(dir), interp.StdIO(stdin, stdout, stderr), interp.Env(expand.ListEnviron(env...)))
	if err != nil {
		return 2, err
	}
	err = r.Run(ctx, f)
	var status interp.ExitStatus
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &status):
		return int(status), nil
	default:
		return 1, err
	}
}

func permissionMode(m string) string {
	if m == "" || m == "manual" {
		return "default"
	}
	return m
}
