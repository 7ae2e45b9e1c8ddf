package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"
)

// codex plays `codex exec --json [resume ID] PROMPT` (docs/exec.md).
type codex struct{ items int }

func (c *codex) name() string  { return "codex" }
func (c *codex) newID() string { return uuid.NewString() }

func (c *codex) parse(args []string) (invocation, error) {
	var inv invocation
	if len(args) == 0 || args[0] != "exec" {
		return inv, usageError{"the fake codex only implements `codex exec`"}
	}
	var jsonOut, skipGit bool
	positional, beforeDashes, err := options{
		switches: map[string]func(){
			"--json": func() { jsonOut = true }, "--experimental-json": func() { jsonOut = true },
			"--skip-git-repo-check":                      func() { skipGit = true },
			"--dangerously-bypass-approvals-and-sandbox": nil, "--yolo": nil, "--ephemeral": nil,
		},
		values: map[string]func(string) error{
			"--model": set(&inv.model), "-m": set(&inv.model),
			"--sandbox": nil, "-s": nil, "--cd": nil, "-C": nil, "--config": nil, "-c": nil,
		},
		unknown:       func(a string) error { return usageError{fmt.Sprintf("error: unexpected argument '%s' found", a)} },
		dashIsOperand: true,
	}.scan(args[1:])
	if err != nil {
		return inv, err
	}
	// `resume` is a subcommand only as the first operand before a "--".
	if beforeDashes > 0 && positional[0] == "resume" {
		if len(positional) == 1 {
			return inv, usageError{"error: resume needs a SESSION_ID (or --last)"}
		}
		inv.resume, positional = positional[1], positional[2:]
	}
	if len(positional) != 1 {
		return inv, usageError{fmt.Sprintf("error: expected one PROMPT, got %q", positional)}
	}
	inv.prompt = positional[0]
	if !jsonOut {
		return inv, usageError{"the fake codex only implements --json output"}
	}
	if _, err := os.Stat(".git"); err != nil && !skipGit {
		return inv, cliError("Not inside a trusted directory and --skip-git-repo-check was not specified.")
	}
	return inv, nil
}

func (c *codex) noSession(id string) int {
	fmt.Fprintf(os.Stderr, "Error: thread/resume: thread/resume failed: no rollout found for thread id %s (code -32600)\n", id)
	return 1
}

func (c *codex) item(v obj) obj {
	v["id"] = fmt.Sprintf("item_%d", c.items)
	c.items++
	return v
}

func (c *codex) play(s *session, inv invocation, r Run) int {
	emit(obj{"type": "thread.started", "thread_id": s.ID})
	emit(obj{"type": "turn.started"})
	for _, st := range r.Steps {
		switch {
		case st.Reply != "" || st.Recall:
			text := s.reply(st)
			emit(obj{"type": "item.completed", "item": c.item(obj{"type": "agent_message", "text": text})})
		case st.Edit != nil:
			kind := "update"
			if _, err := os.Stat(st.Edit.Path); err != nil {
				kind = "add"
			}
			status := "completed"
			if err := edit(st.Edit); err != nil {
				fmt.Fprintln(os.Stderr, err)
				status = "failed"
			}
			abs, _ := filepath.Abs(st.Edit.Path)
			emit(obj{"type": "item.completed", "item": c.item(obj{
				"type": "file_change", "changes": []obj{{"path": abs, "kind": kind}}, "status": status,
			})})
		case st.Command != nil:
			it := c.item(obj{"type": "command_execution", "command": st.Command.Line, "aggregated_output": "", "status": "in_progress"})
			emit(obj{"type": "item.started", "item": it})
			status := "completed"
			if st.Command.ExitCode != 0 {
				status = "failed"
			}
			emit(obj{"type": "item.completed", "item": obj{
				"id": it["id"], "type": "command_execution", "command": st.Command.Line,
				"aggregated_output": st.Command.Output, "exit_code": st.Command.ExitCode, "status": status,
			}})
		case st.Unknown:
			emit(obj{"type": "turn.diff.updated", "unified_diff": "--- a\n+++ b\n"})
			emit(obj{"type": "item.completed", "item": c.item(obj{"type": "hologram", "text": "a future item type"})})
			fmt.Println("2026-05-02T10:00:00Z WARN codex_core: not JSON")
		case st.Stderr != "":
			fmt.Fprintln(os.Stderr, st.Stderr)
		case st.Fail != "":
			emit(obj{"type": "error", "message": st.Fail})
			emit(obj{"type": "turn.failed", "error": obj{"message": st.Fail}})
			return 1
		}
	}
	emit(obj{"type": "turn.completed", "usage": obj{"input_tokens": 1000 + 10*len(s.Prompts), "cached_input_tokens": 0, "output_tokens": 20}})
	return 0
}
