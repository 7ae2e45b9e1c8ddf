package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/google/uuid"
)

// plain plays a user's own agent for the command backend:
//
//	agent [--session ID | --resume ID] [--model M] [--jsonl] [--] TASK...
//
// In text mode it prints its replies and nothing else; with --jsonl it prints
// the command backend's default fields (session_id, text, result, is_error,
// tool, file).
type plain struct{}

func (p *plain) name() string  { return "command" }
func (p *plain) newID() string { return uuid.NewString() }

func (p *plain) parse(args []string) (invocation, error) {
	var inv invocation
	words, _, err := options{
		switches: map[string]func(){"--jsonl": func() { inv.jsonl = true }},
		values:   map[string]func(string) error{"--session": set(&inv.session), "--resume": set(&inv.resume), "--model": set(&inv.model)},
		unknown:  func(a string) error { return usageError{"unknown flag " + a} },
	}.scan(args)
	if err != nil {
		return inv, err
	}
	inv.prompt = strings.Join(words, " ")
	if inv.session != "" && inv.resume != "" {
		return inv, usageError{"--session and --resume exclude each other"}
	}
	return inv, nil
}

func (p *plain) noSession(id string) int {
	fmt.Fprintf(os.Stderr, "agent: no such session: %s\n", id)
	return 1
}

func (p *plain) play(s *session, inv invocation, r Run) int {
	if inv.jsonl {
		emit(obj{"session_id": s.ID})
	}
	var replies []string
	for _, st := range r.Steps {
		switch {
		case st.Reply != "" || st.Recall:
			text := s.reply(st)
			replies = append(replies, text)
			if inv.jsonl {
				emit(obj{"text": text})
			} else {
				fmt.Println(text)
			}
		case st.Edit != nil:
			if err := edit(st.Edit); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if inv.jsonl {
				emit(obj{"tool": "write", "file": st.Edit.Path})
			}
		case st.Command != nil:
			if inv.jsonl {
				emit(obj{"tool": "shell", "line": st.Command.Line, "output": st.Command.Output})
			}
		case st.Unknown:
			if inv.jsonl {
				emit(obj{"event": "hologram"})
				fmt.Println("progress: 50% (not JSON)")
			}
		case st.Stderr != "":
			fmt.Fprintln(os.Stderr, st.Stderr)
		case st.Fail != "":
			if inv.jsonl {
				emit(obj{"result": st.Fail, "is_error": true})
			} else {
				fmt.Fprintln(os.Stderr, "agent: "+st.Fail)
			}
			return 1
		}
	}
	if inv.jsonl {
		emit(obj{"result": strings.Join(replies, "\n"), "is_error": false, "session_id": s.ID})
	}
	return 0
}
