// Package fakeclaudelog is the invocation log of the test double of the
// Claude Code CLI (services/mesh-exec/testdata/fakeclaude): with
// FAKE_CLAUDE_LOG set, every run of the fake appends one JSON line saying
// how it was run, which tests then read to check how mesh-exec and the
// workers ran the agent (its argv, directory, environment, stdin, user). The
// fake writes the log with Append and tests read it with Read or Parse, so
// its format is written once. Only the fake and tests import this package.
package fakeclaudelog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Env is the variable naming the log's file.
const Env = "FAKE_CLAUDE_LOG"

// Invocation is one run of the fake: one line of the log.
type Invocation struct {
	Argv []string `json:"argv"`
	Cwd  string   `json:"cwd"`
	// EnvHasClaudeCode and EnvHasCodeEntrypoint say whether CLAUDECODE
	// and CLAUDE_CODE_ENTRYPOINT were set (Claude Code sets them for its
	// own children; an agent run from one must not inherit them).
	EnvHasClaudeCode     bool `json:"env_has_CLAUDECODE"`
	EnvHasCodeEntrypoint bool `json:"env_has_CLAUDE_CODE_ENTRYPOINT"`
	// StdinIsDevNull says whether stdin was /dev/null or empty and closed.
	StdinIsDevNull bool `json:"stdin_is_devnull"`
	UID            int  `json:"uid"`
	PID            int  `json:"pid"`
}

// Args is the invocation's argv joined by spaces, to look for flags in.
func (i Invocation) Args() string { return strings.Join(i.Argv, " ") }

// Append adds inv to the log at path: one write of one line to a file
// opened O_APPEND, so that concurrent runs do not mix their lines.
func Append(path string, inv Invocation) error {
	line, err := json.Marshal(inv)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}

// Read reads the log at path; a log that does not exist holds no runs.
func Read(path string) ([]Invocation, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Parse reads a log's content, a run a line. A line that is not a run (a
// write cut short by a kill, with the next run appended to it) is passed
// over: Parse returns every run it could read, and an error naming the
// lines it could not.
func Parse(data []byte) ([]Invocation, error) {
	var (
		out  []Invocation
		errs []error
	)
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var inv Invocation
		if err := json.Unmarshal(line, &inv); err != nil {
			errs = append(errs, fmt.Errorf("fake claude log line %q: %w", line, err))
			continue
		}
		out = append(out, inv)
	}
	return out, errors.Join(errs...)
}
