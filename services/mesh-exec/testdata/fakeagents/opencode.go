package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// opencode plays `opencode run --format json [--session ses_...] MESSAGE`
// (packages/opencode/src/cli/cmd/run.ts).
type opencode struct{ parts int }

func (o *opencode) name() string { return "opencode" }

// newID makes an id shaped like OpenCode's: "ses_" and 26 letters and digits.
func (o *opencode) newID() string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var b [26]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "ses_" + string(b[:])
}

func (o *opencode) parse(args []string) (invocation, error) {
	var inv invocation
	if len(args) == 0 || args[0] != "run" {
		return inv, usageError{"the fake opencode only implements `opencode run`"}
	}
	format := "default"
	words, _, err := options{
		switches: map[string]func(){
			"--auto": nil, "--dangerously-skip-permissions": nil, "--yolo": nil, "--continue": nil, "-c": nil,
			"--fork": nil, "--share": nil, "--thinking": nil,
		},
		values: map[string]func(string) error{
			"--format": set(&format), "--model": set(&inv.model), "-m": set(&inv.model), "--session": set(&inv.resume), "-s": set(&inv.resume),
			"--agent": nil, "--variant": nil, "--title": nil, "--dir": nil, "--file": nil, "-f": nil,
		},
		unknown: func(a string) error { return usageError{"Unknown argument: " + strings.TrimLeft(a, "-")} },
	}.scan(args[1:])
	if err != nil {
		return inv, err
	}
	if format != "json" {
		return inv, usageError{"the fake opencode only implements --format json"}
	}
	if inv.model != "" && !strings.Contains(inv.model, "/") {
		return inv, fmt.Errorf("model %q is not provider/model", inv.model)
	}
	inv.prompt = strings.Join(words, " ")
	if strings.TrimSpace(inv.prompt) == "" {
		return inv, cliError("You must provide a message or a command")
	}
	return inv, nil
}

func (o *opencode) noSession(string) int {
	fmt.Fprint(os.Stderr, "\x1b[91m\x1b[1mError: \x1b[0mSession not found\n")
	return 1
}

func (o *opencode) part(sessionID string, v obj) obj {
	v["id"] = fmt.Sprintf("prt_%04d", o.parts)
	v["sessionID"] = sessionID
	v["messageID"] = "msg_0001"
	o.parts++
	return v
}

func (o *opencode) play(s *session, inv invocation, r Run) int {
	ev := func(typ string, v obj) {
		v["type"] = typ
		v["timestamp"] = now()
		v["sessionID"] = s.ID
		emit(v)
	}
	ev("step_start", obj{"part": o.part(s.ID, obj{"type": "step-start"})})
	code := 0
	for _, st := range r.Steps {
		switch {
		case st.Reply != "" || st.Recall:
			text := s.reply(st)
			ev("text", obj{"part": o.part(s.ID, obj{"type": "text", "text": text, "time": obj{"start": now(), "end": now()}})})
		case st.Edit != nil:
			abs, _ := filepath.Abs(st.Edit.Path)
			state := obj{"status": "completed", "input": obj{"filePath": abs, "content": st.Edit.Content}, "output": "", "title": st.Edit.Path}
			if err := edit(st.Edit); err != nil {
				state = obj{"status": "error", "input": obj{"filePath": abs}, "error": err.Error()}
			}
			ev("tool_use", obj{"part": o.part(s.ID, obj{"type": "tool", "tool": "write", "callID": "call_" + st.Edit.Path, "state": state})})
		case st.Command != nil:
			state := obj{"status": "completed", "input": obj{"command": st.Command.Line}, "output": st.Command.Output, "title": st.Command.Line}
			if st.Command.ExitCode != 0 {
				state = obj{"status": "error", "input": obj{"command": st.Command.Line}, "error": st.Command.Output}
			}
			ev("tool_use", obj{"part": o.part(s.ID, obj{"type": "tool", "tool": "bash", "callID": "call_bash", "state": state})})
		case st.Unknown:
			ev("snapshot_created", obj{"part": obj{"type": "snapshot", "snapshot": "4b825dc6"}})
			fmt.Println("INFO  service=bus not JSON")
		case st.Stderr != "":
			fmt.Fprintln(os.Stderr, st.Stderr)
		case st.Fail != "":
			ev("error", obj{"error": obj{"name": "UnknownError", "data": obj{"message": st.Fail}}})
			code = 1
		}
		if code != 0 {
			break
		}
	}
	ev("step_finish", obj{"part": o.part(s.ID, obj{
		"type": "step-finish", "reason": "stop", "cost": 0.0015,
		"tokens": obj{"input": 1000 + 10*len(s.Prompts), "output": 20, "reasoning": 0, "cache": obj{"read": 0, "write": 0}},
	})})
	ev("done", obj{"reason": "idle", "rejected": []string{}})
	return code
}
