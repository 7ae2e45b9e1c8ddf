package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// script is what the fake agent does in a run; the format is in the
// package doc.
type script struct {
	Steps        []step   `json:"steps"`
	Reply        string   `json:"reply"`
	CostUSD      *float64 `json:"cost_usd"`
	InputTokens  *int64   `json:"input_tokens"`
	OutputTokens *int64   `json:"output_tokens"`
	Turns        []script `json:"turns"`
}

type step struct {
	Text         string          `json:"text"`
	Write        *writeStep      `json:"write"`
	Edit         *editStep       `json:"edit"`
	Read         *readStep       `json:"read"`
	Bash         string          `json:"bash"`
	Tool         *toolStep       `json:"tool"`
	Notification string          `json:"notification"`
	MCPCall      *mcpCallStep    `json:"mcp_call"`
	UnknownEvent bool            `json:"unknown_event"`
	Event        json.RawMessage `json:"event"`
	Stderr       string          `json:"stderr"`
	Fail         *string         `json:"fail"`
	Crash        *crashStep      `json:"crash"`
	Hang         *hangStep       `json:"hang"`
	// SleepMS pauses the "agent" for that long, as a slow model turn would:
	// for tests that stop things in the middle of a run.
	SleepMS int `json:"sleep_ms"`
}

type writeStep struct {
	FilePath string `json:"file_path"`
	Content  string `json:"content"`
}

type editStep struct {
	FilePath   string `json:"file_path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

type readStep struct {
	FilePath string `json:"file_path"`
}

// toolStep calls a tool the fake does not implement, by name and input.
type toolStep struct {
	Name  string         `json:"name"`
	Input map[string]any `json:"input"`
}

type mcpCallStep struct {
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// SaveAs, when set, has the "agent" write the tool's text result into
	// this file (with the Write tool) after the call.
	SaveAs string `json:"save_as"`
}

type crashStep struct {
	ExitCode int    `json:"exit_code"`
	Stderr   string `json:"stderr"`
}

type hangStep struct {
	PIDFile             string `json:"pid_file"`
	IgnoreSIGTERM       bool   `json:"ignore_sigterm"`
	ChildIgnoresSIGTERM bool   `json:"child_ignores_sigterm"`
}

// defaultScript is the run without FAKE_CLAUDE_SCRIPT: reply "ok: <task>".
func defaultScript() *script { return &script{} }

// workspaceScript is the script a repository can carry for the fake, when
// FAKE_CLAUDE_SCRIPT is not set: end-to-end tests put it in the repository
// a pipeline works on, since they cannot set the environment of the worker
// containers the marketplace starts.
const workspaceScript = ".fake-claude.json"

// scriptPath is FAKE_CLAUDE_SCRIPT, else the workspace's script if cwd has
// one, else "" (the default script).
func scriptPath(cwd string) string {
	if p := os.Getenv("FAKE_CLAUDE_SCRIPT"); p != "" {
		return p
	}
	p := filepath.Join(cwd, workspaceScript)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

// loadScript reads and checks the script at path; "" is the default script.
// Unknown fields are refused, so a typo in a test's script fails loudly
// instead of silently doing nothing.
func loadScript(path string) (*script, error) {
	if path == "" {
		return defaultScript(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

func (s *script) check() error {
	if len(s.Turns) > 0 && (len(s.Steps) > 0 || s.Reply != "" || s.CostUSD != nil || s.InputTokens != nil || s.OutputTokens != nil) {
		return errors.New(`"turns" excludes every other field`)
	}
	for i := range s.Turns {
		if err := s.Turns[i].check(); err != nil {
			return fmt.Errorf("turns[%d]: %w", i, err)
		}
	}
	for i, st := range s.Steps {
		if n := st.actions(); n != 1 {
			return fmt.Errorf("steps[%d] has %d actions, want exactly one", i, n)
		}
		switch {
		case st.Write != nil && st.Write.FilePath == "",
			st.Edit != nil && st.Edit.FilePath == "",
			st.Read != nil && st.Read.FilePath == "":
			return fmt.Errorf("steps[%d]: file_path is empty", i)
		case st.Tool != nil && st.Tool.Name == "":
			return fmt.Errorf("steps[%d]: tool needs a name", i)
		case st.MCPCall != nil && (st.MCPCall.Server == "" || st.MCPCall.Tool == ""):
			return fmt.Errorf("steps[%d]: mcp_call needs server and tool", i)
		case st.Event != nil && !json.Valid(st.Event):
			return fmt.Errorf("steps[%d]: event is not JSON", i)
		}
	}
	return nil
}

func (st step) actions() int {
	n := 0
	for _, set := range []bool{
		st.Text != "", st.Write != nil, st.Edit != nil, st.Read != nil, st.Bash != "", st.Tool != nil, st.Notification != "",
		st.MCPCall != nil, st.UnknownEvent,
		st.Event != nil, st.Stderr != "", st.Fail != nil, st.Crash != nil, st.Hang != nil, st.SleepMS > 0,
	} {
		if set {
			n++
		}
	}
	return n
}

// forTurn returns the script of the session's turn n (0 for a new session).
func (s *script) forTurn(n int) *script {
	if len(s.Turns) == 0 {
		return s
	}
	return &s.Turns[min(n, len(s.Turns)-1)]
}
