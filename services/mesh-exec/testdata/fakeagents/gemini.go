package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
)

// gemini plays `gemini --output-format stream-json [--resume ID] --prompt P`
// (docs/cli/headless.md, packages/core/src/output/types.ts).
type gemini struct{ calls int }

func (g *gemini) name() string  { return "gemini" }
func (g *gemini) newID() string { return uuid.NewString() }

func (g *gemini) parse(args []string) (invocation, error) {
	var inv invocation
	format, hasPrompt := "text", false
	prompt := func(v string) error {
		inv.prompt, hasPrompt = v, true
		return nil
	}
	approval := func(v string) error {
		if v != "default" && v != "auto_edit" && v != "yolo" && v != "plan" {
			return usageError{fmt.Sprintf("Invalid values:\n  Argument: approval-mode, Given: %q", v)}
		}
		return nil
	}
	query, _, err := options{
		switches: map[string]func(){"--yolo": nil, "-y": nil, "--skip-trust": nil, "--sandbox": nil, "-s": nil, "--debug": nil, "-d": nil},
		values: map[string]func(string) error{
			"--output-format": set(&format), "-o": set(&format), "--approval-mode": approval,
			"--model": set(&inv.model), "-m": set(&inv.model), "--resume": set(&inv.resume), "-r": set(&inv.resume),
			"--prompt": prompt, "-p": prompt,
		},
		unknown: func(a string) error { return usageError{"Unknown argument: " + strings.TrimLeft(a, "-")} },
	}.scan(args)
	if err != nil {
		return inv, err
	}
	if format != "stream-json" {
		return inv, usageError{"the fake gemini only implements --output-format stream-json"}
	}
	if inv.resume != "" && !hasPrompt {
		// google-gemini/gemini-cli#14180
		return inv, cliError("When resuming a session, you must provide a message via --prompt (-p) or stdin")
	}
	if !hasPrompt {
		inv.prompt = strings.Join(query, " ")
	}
	if strings.TrimSpace(inv.prompt) == "" {
		return inv, usageError{"No input provided via stdin. Input can be provided by piping data into gemini or using the --prompt option."}
	}
	return inv, nil
}

func (g *gemini) noSession(id string) int {
	fmt.Fprintf(os.Stderr, "Error resuming session: Invalid session identifier %q.\nSearched for sessions in %s.\n", id, sessionsDir())
	return 1
}

func (g *gemini) play(s *session, inv invocation, r Run) int {
	ts := func() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }
	ev := func(typ string, v obj) {
		v["type"] = typ
		v["timestamp"] = ts()
		emit(v)
	}
	model := inv.model
	if model == "" {
		model = "gemini-2.5-pro"
	}
	ev("init", obj{"session_id": s.ID, "model": model})
	ev("message", obj{"role": "user", "content": inv.prompt})
	tool := func(name string, params obj, ok bool, output, errMsg string) {
		g.calls++
		id := fmt.Sprintf("%s-%d-%d", name, time.Now().UnixMilli(), g.calls)
		ev("tool_use", obj{"tool_name": name, "tool_id": id, "parameters": params})
		if ok {
			ev("tool_result", obj{"tool_id": id, "status": "success", "output": output})
		} else {
			ev("tool_result", obj{"tool_id": id, "status": "error", "output": output, "error": obj{"type": "execution_failed", "message": errMsg}})
		}
	}
	for _, st := range r.Steps {
		switch {
		case st.Reply != "" || st.Recall:
			text := s.reply(st)
			// Streamed as delta chunks, as Gemini does.
			half := len(text) / 2
			for half > 0 && half < len(text) && text[half]&0xc0 == 0x80 {
				half++ // do not split a UTF-8 sequence
			}
			for _, chunk := range []string{text[:half], text[half:]} {
				if chunk != "" {
					ev("message", obj{"role": "assistant", "content": chunk, "delta": true})
				}
			}
		case st.Edit != nil:
			abs, _ := filepath.Abs(st.Edit.Path)
			err := edit(st.Edit)
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			tool("write_file", obj{"file_path": abs, "content": st.Edit.Content}, err == nil, "Successfully created and wrote to new file: "+abs, msg)
		case st.Command != nil:
			tool("run_shell_command", obj{"command": st.Command.Line}, st.Command.ExitCode == 0, st.Command.Output,
				fmt.Sprintf("Command exited with code %d", st.Command.ExitCode))
		case st.Unknown:
			ev("thought", obj{"subject": "Considering", "description": "a future event type"})
			fmt.Println("Loaded cached credentials.")
		case st.Stderr != "":
			fmt.Fprintln(os.Stderr, st.Stderr)
		case st.Fail != "":
			ev("error", obj{"severity": "error", "message": st.Fail})
			ev("result", obj{
				"status": "error", "error": obj{"type": "FatalError", "message": st.Fail},
				"stats": obj{"total_tokens": 120, "input_tokens": 100, "output_tokens": 20, "cached": 0, "input": 100, "duration_ms": 5, "tool_calls": g.calls},
			})
			return 1
		}
	}
	ev("result", obj{
		"status": "success",
		"stats":  obj{"total_tokens": 1020 + 10*len(s.Prompts), "input_tokens": 1000 + 10*len(s.Prompts), "output_tokens": 20, "cached": 0, "input": 1000, "duration_ms": 7, "tool_calls": g.calls},
	})
	return 0
}
