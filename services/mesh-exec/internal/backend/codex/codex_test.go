package codex

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

const sessionID = "0199a213-81c0-7800-8aa1-bbab2a035a53"

func TestCommand(t *testing.T) {
	t.Parallel()
	base := []string{"codex", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	tests := []struct {
		name string
		cfg  Config
		req  backend.Request
		want []string
		err  string
	}{
		{name: "new session", req: backend.Request{Task: "fix the test"}, want: with("--", "fix the test")},
		{name: "model", req: backend.Request{Task: "t", Model: "gpt-5-codex"}, want: with("--model=gpt-5-codex", "--", "t")},
		{
			name: "resume puts the flags before the subcommand",
			req:  backend.Request{Task: "go on", SessionID: sessionID, Model: "gpt-5"},
			want: with("--model=gpt-5", "resume", sessionID, "--", "go on"),
		},
		{name: "a task that looks like a flag stays the prompt", req: backend.Request{Task: "--help"}, want: with("--", "--help")},
		{name: "a task that names a subcommand stays the prompt", req: backend.Request{Task: "review"}, want: with("--", "review")},
		{
			name: "unsupported fields are left out",
			req:  backend.Request{Task: "t", AllowedTools: []string{"Read"}, MaxTurns: 3, AppendSystemPrompt: "x", MCPConfig: "/m.json"},
			want: with("--", "t"),
		},
		{name: "binary", cfg: Config{Binary: "/opt/codex/bin/codex"}, req: backend.Request{Task: "t"}, want: append([]string{"/opt/codex/bin/codex"}, with("--", "t")[1:]...)},
		{name: "flag as session id", req: backend.Request{Task: "t", SessionID: "--last"}, err: "not a UUID"},
		{name: "thread name as session id", req: backend.Request{Task: "t", SessionID: "my-thread"}, err: "not a UUID"},
		{name: "empty task", req: backend.Request{Task: "  "}, err: "empty"},
		{name: "stdin task", req: backend.Request{Task: "-"}, err: "stdin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := New(tt.cfg).Command(tt.req)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Command() error = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Command() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Command() =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	if got := New(Config{}).Name(); got != "codex" {
		t.Errorf("Name() = %q", got)
	}
}

// run feeds a testdata stream to a parser. The streams are reconstructed from
// Codex's documentation (docs/exec.md, exec_events.rs), not captured; see
// testdata/README.md.
func run(t *testing.T, file string, req backend.Request, exitCode int, stderr string) ([]backend.Event, backend.Result) {
	t.Helper()
	p := New(Config{}).NewParser(req)
	events := backendtest.FeedFile(t, p, file)
	return events, p.Finish(exitCode, stderr)
}

func TestParserNewSession(t *testing.T) {
	t.Parallel()
	events, res := run(t, "new_session.jsonl", backend.Request{}, 0, "")
	wantKinds := []backend.Kind{
		backend.KindInit,
		backend.KindToolUse, backend.KindToolResult, // go test fails
		backend.KindText,
		backend.KindToolUse, backend.KindToolResult, // file change
		backend.KindToolUse, backend.KindToolResult, // mcp
		backend.KindToolUse, backend.KindToolResult, // go test passes (no item.started)
		backend.KindText,
		backend.KindResult,
	}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, wantKinds) {
		t.Fatalf("kinds = %v\nwant %v", got, wantKinds)
	}
	if events[0].SessionID != sessionID {
		t.Errorf("init session = %q", events[0].SessionID)
	}
	if e := events[2]; !e.IsError || e.Tool != "command_execution" || !strings.Contains(e.Text, "FAIL") {
		t.Errorf("failed command result = %+v", e)
	}
	if e := events[6]; e.Tool != "mcp__docs__search" || e.Text != `{"q":"Add"}` {
		t.Errorf("mcp tool use = %+v", e)
	}
	if e := events[7]; e.IsError || e.Text != "Add returns a+b." {
		t.Errorf("mcp tool result = %+v", e)
	}
	want := backend.Result{
		SessionID:     sessionID,
		Output:        "Fixed Add in add.go and added a test; go test passes.",
		NumTurns:      1,
		InputTokens:   24763,
		OutputTokens:  122,
		ToolsUsed:     []string{"command_execution", "file_change", "mcp__docs__search"},
		FilesModified: []string{"/workspace/calc/add.go", "/workspace/calc/add_test.go"},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Finish() =\n%+v\nwant\n%+v", res, want)
	}
}

func TestParserResumeSucceedsAfterARetriedError(t *testing.T) {
	t.Parallel()
	_, res := run(t, "resume.jsonl", backend.Request{SessionID: sessionID}, 0, "")
	if res.IsError || res.Output != "You asked me to fix Add; that is done." || res.SessionID != sessionID {
		t.Errorf("Finish() = %+v", res)
	}
	if res.CostUSD != 0 {
		t.Errorf("CostUSD = %v, want 0: codex reports no price", res.CostUSD)
	}
}

func TestParserTurnFailed(t *testing.T) {
	t.Parallel()
	events, res := run(t, "turn_failed.jsonl", backend.Request{}, 1, "")
	if last := events[len(events)-1]; last.Kind != backend.KindError || !last.IsError {
		t.Errorf("last event = %+v", last)
	}
	if !res.IsError || !strings.Contains(res.Output, "401 Unauthorized") {
		t.Errorf("Finish() = %+v", res)
	}
	if !errors.Is(res.Err, backend.ErrNotLoggedIn) {
		t.Errorf("Err = %v, want ErrNotLoggedIn", res.Err)
	}
	if res.SessionID != "0199a213-81c0-7800-8aa1-bbab2a035a54" {
		t.Errorf("SessionID = %q", res.SessionID)
	}
}

func TestParserNoTurnEnd(t *testing.T) {
	t.Parallel()
	_, res := run(t, "item_error.jsonl", backend.Request{}, 1, "some stderr")
	if !res.IsError || res.Output != "stream error: unexpected end of stream" {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestFinishWithoutOutput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		req    backend.Request
		exit   int
		stderr string
		output string
		err    error
	}{
		{
			name:   "unknown session",
			req:    backend.Request{SessionID: sessionID},
			exit:   1,
			stderr: "Error: thread/resume: thread/resume failed: no rollout found for thread id " + sessionID + " (code -32600)\n",
			output: "Error: thread/resume: thread/resume failed: no rollout found for thread id " + sessionID + " (code -32600)",
			err:    backend.ErrSessionNotFound,
		},
		{name: "nothing at all", exit: 2, output: "codex exited with code 2 without finishing a turn"},
		{name: "exit 0 without a turn is still an error", exit: 0, output: "codex exited with code 0 without finishing a turn"},
		{
			name:   "stderr tail keeps the end",
			exit:   1,
			stderr: strings.Repeat("noise line\n", 100) + "the real reason\n",
			output: strings.TrimSpace(strings.Repeat("noise line\n", 19) + "the real reason"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := New(Config{}).NewParser(tt.req)
			res := p.Finish(tt.exit, tt.stderr)
			if !res.IsError || res.Output != tt.output || !errors.Is(res.Err, tt.err) || (tt.err == nil && res.Err != nil) {
				t.Errorf("Finish() = %+v\nwant output %q, err %v", res, tt.output, tt.err)
			}
			if res.SessionID != tt.req.SessionID {
				t.Errorf("SessionID = %q, want the resumed %q", res.SessionID, tt.req.SessionID)
			}
		})
	}
}

func TestParserIgnoresNoise(t *testing.T) {
	t.Parallel()
	p := New(Config{}).NewParser(backend.Request{})
	for _, line := range []string{
		"", "   ", "not json", "{", "[1,2]", "null", `{"type":42}`, `{"type":"item.completed"}`,
		`{"type":"item.completed","item":"nope"}`, `{"type":"thread.started"}`, `{"type":"unknown.event"}`,
		`{"type":"error"}`, `{"type":"item.completed","item":{"type":"reasoning","text":"hmm"}}`,
	} {
		if got := p.Line([]byte(line)); len(got) != 0 {
			t.Errorf("Line(%q) = %+v, want nothing", line, got)
		}
	}
}

func FuzzParser(f *testing.F) {
	for _, name := range []string{"new_session.jsonl", "resume.jsonl", "turn_failed.jsonl", "item_error.jsonl"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			f.Add([]byte(line), 0)
		}
	}
	f.Add([]byte(`{"type":"item.completed","item":{"type":"command_execution","exit_code":1e400}}`), 1)
	f.Add([]byte(`{"type":"turn.completed","usage":{"input_tokens":-1e30}}`), 0)
	f.Fuzz(func(t *testing.T, line []byte, exitCode int) {
		p := New(Config{}).NewParser(backend.Request{})
		p.Line(line)
		p.Line(line) // a second time: state from the first must not break it
		res := p.Finish(exitCode, string(line))
		if !res.IsError && res.Err != nil {
			t.Errorf("a success with an error class: %+v", res)
		}
	})
}
