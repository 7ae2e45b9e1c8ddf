// Package script is the script format of the fakeagents program: what one
// scripted run of a fake agent CLI does. Tests write it as JSON; the fake
// reads it from the file $FAKEAGENT_SCRIPT names.
package script

import (
	"encoding/json"
	"fmt"
	"os"
)

// Script is a fake agent's whole script: the runs it can play.
type Script struct {
	Runs []Run `json:"runs"`
}

// Run is what one invocation does.
type Run struct {
	// Task, when set, is the prompt this run answers; empty answers any
	// prompt no other run names.
	Task  string `json:"task,omitempty"`
	Steps []Step `json:"steps"`
	// ExitCode, when set, replaces the exit code the CLI would have used.
	ExitCode int `json:"exit_code,omitempty"`
}

// Step is one thing the agent does; exactly one field is set.
type Step struct {
	// Reply is assistant text.
	Reply string `json:"reply,omitempty"`
	// Edit writes a file with the CLI's file tool.
	Edit *Edit `json:"edit,omitempty"`
	// Command reports a shell command and its output (nothing runs).
	Command *Command `json:"command,omitempty"`
	// Unknown prints an event type the CLI does not have yet and a line
	// that is not JSON.
	Unknown bool `json:"unknown,omitempty"`
	// Recall replies with the session's previous prompt, which shows that
	// a resume continued the session.
	Recall bool `json:"recall,omitempty"`
	// Stderr is written to stderr.
	Stderr string `json:"stderr,omitempty"`
	// Fail ends the run with the CLI's own error report and exit code 1.
	Fail string `json:"fail,omitempty"`
}

// Edit writes Content to Path, relative to the working directory.
type Edit struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// Command is a shell command the agent reports having run.
type Command struct {
	Line     string `json:"line"`
	Output   string `json:"output"`
	ExitCode int    `json:"exit_code"`
}

// Load reads a script file.
func Load(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Script
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return &s, nil
}

// Write writes a script file.
func (s *Script) Write(path string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Pick returns the run for prompt: the first whose Task is prompt, else the
// first without a Task, else a run that fails saying the script has none.
func (s *Script) Pick(prompt string) Run {
	for _, r := range s.Runs {
		if r.Task != "" && r.Task == prompt {
			return r
		}
	}
	for _, r := range s.Runs {
		if r.Task == "" {
			return r
		}
	}
	return Run{Steps: []Step{{Fail: fmt.Sprintf("fakeagents: no run in the script for %q", prompt)}}}
}

// Reply is the script of one run that answers text.
func Reply(text string) *Script {
	return &Script{Runs: []Run{{Steps: []Step{{Reply: text}}}}}
}
