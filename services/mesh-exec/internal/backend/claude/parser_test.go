package claude

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

// parse feeds a file's lines to a fresh parser, as the runner does.
func parse(t *testing.T, data []byte, exitCode int, stderr string) ([]backend.Event, backend.Result) {
	t.Helper()
	p := New(Config{}).NewParser(backend.Request{})
	events := backendtest.Feed(p, data)
	return events, p.Finish(exitCode, stderr)
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "claude-code-2.1.330", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFixtures parses every capture of the real CLI. All of them ran without
// credentials, so every run failed; see testdata/claude-code-2.1.330/README.md.
func TestFixtures(t *testing.T) {
	t.Parallel()
	const (
		notLoggedIn = "Not logged in · Please run /login"
		s1          = "214248d1-7307-4c48-a6bd-441352495a86"
		unknown     = "00000000-0000-4000-8000-000000000000"
	)
	notLoggedInStream := func(session string) []backend.Event {
		return []backend.Event{
			{Kind: backend.KindInit, SessionID: session},
			{Kind: backend.KindError, SessionID: session, Text: notLoggedIn, IsError: true},
			{Kind: backend.KindResult, SessionID: session, Text: notLoggedIn, IsError: true},
		}
	}
	tests := []struct {
		file       string
		stderrFile string
		events     []backend.Event
		result     backend.Result // without Output
		output     []string       // what Output must contain
	}{
		{
			file:   "print-stream-json-not-logged-in.jsonl",
			events: notLoggedInStream(s1),
			result: backend.Result{SessionID: s1, IsError: true, DurationMS: 313, NumTurns: 1, Err: backend.ErrNotLoggedIn},
			output: []string{notLoggedIn, "ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "mesh-exec's environment"},
		},
		{
			file:   "resume-same-cwd.jsonl",
			events: notLoggedInStream(s1),
			result: backend.Result{SessionID: s1, IsError: true, DurationMS: 147, NumTurns: 1, Err: backend.ErrNotLoggedIn},
			output: []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"},
		},
		{
			file:   "resume-other-cwd.jsonl",
			events: notLoggedInStream(s1),
			result: backend.Result{SessionID: s1, IsError: true, DurationMS: 114, NumTurns: 1, Err: backend.ErrNotLoggedIn},
			output: []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"},
		},
		{
			// subtype "success" with is_error true: success is is_error.
			file:   "print-json-not-logged-in.json",
			events: []backend.Event{{Kind: backend.KindResult, SessionID: "be9d4fe4-a2fd-441f-8d94-9ca387e75bf6", Text: notLoggedIn, IsError: true}},
			result: backend.Result{SessionID: "be9d4fe4-a2fd-441f-8d94-9ca387e75bf6", IsError: true, DurationMS: 171, NumTurns: 1, Err: backend.ErrNotLoggedIn},
			output: []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN"},
		},
		{
			file:       "resume-unknown-session.jsonl",
			stderrFile: "resume-unknown-session.stderr.txt",
			events:     []backend.Event{{Kind: backend.KindResult, SessionID: unknown, Text: "No conversation found with session ID: " + unknown, IsError: true}},
			result:     backend.Result{SessionID: unknown, IsError: true, Err: backend.ErrSessionNotFound},
			output:     []string{unknown, "unknown to the agent", "new session"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			var stderr string
			if tt.stderrFile != "" {
				stderr = string(readFixture(t, tt.stderrFile))
			}
			events, res := parse(t, readFixture(t, tt.file), 1, stderr)
			if !reflect.DeepEqual(events, tt.events) {
				t.Errorf("events:\n%+v\nwant\n%+v", events, tt.events)
			}
			output := res.Output
			res.Output = ""
			if !reflect.DeepEqual(res, tt.result) {
				t.Errorf("result:\n%+v\nwant\n%+v", res, tt.result)
			}
			for _, s := range tt.output {
				if !strings.Contains(output, s) {
					t.Errorf("Output = %q, want it to contain %q", output, s)
				}
			}
		})
	}
}

// TestSessionNotFoundFromStderrAlone covers a CLI that printed the unknown
// session only on stderr.
func TestSessionNotFoundFromStderrAlone(t *testing.T) {
	t.Parallel()
	_, res := parse(t, nil, 1, string(readFixture(t, "resume-unknown-session.stderr.txt")))
	if !res.IsError || !errors.Is(res.Err, backend.ErrSessionNotFound) || !strings.Contains(res.Output, "00000000-0000-4000-8000-000000000000") {
		t.Errorf("result = %+v, want IsError, ErrSessionNotFound and the id in Output", res)
	}
}

// TestSuccessStream parses testdata/handwritten/success.jsonl, a successful
// run in the captures' shapes.
func TestSuccessStream(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "handwritten", "success.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		s    = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"
		repo = "/workspace/repo/"
	)
	events, res := parse(t, data, 0, "")
	wantEvents := []backend.Event{
		{Kind: backend.KindInit, SessionID: s},
		{Kind: backend.KindText, SessionID: s, Text: "I'll fix the bug."},
		{Kind: backend.KindToolUse, SessionID: s, Tool: "Read", ToolCallID: "toolu_01A"},
		{Kind: backend.KindToolResult, SessionID: s, Tool: "Read", ToolCallID: "toolu_01A", Text: "package main\n\nfunc main() {}\n"},
		{Kind: backend.KindToolUse, SessionID: s, Tool: "Edit", ToolCallID: "toolu_01B", Text: repo + "main.go"},
		{Kind: backend.KindToolResult, SessionID: s, Tool: "Edit", ToolCallID: "toolu_01B", Text: "The file " + repo + "main.go has been updated successfully."},
		{Kind: backend.KindToolUse, SessionID: s, Tool: "Write", ToolCallID: "toolu_01C", Text: repo + "notes.md"},
		{Kind: backend.KindToolResult, SessionID: s, Tool: "Write", ToolCallID: "toolu_01C", Text: "<tool_use_error>EACCES: permission denied</tool_use_error>", IsError: true},
		{Kind: backend.KindToolUse, SessionID: s, Tool: "MultiEdit", ToolCallID: "toolu_01D", Text: repo + "util.go"},
		{Kind: backend.KindToolUse, SessionID: s, Tool: "NotebookEdit", ToolCallID: "toolu_01E", Text: repo + "a.ipynb"},
		{Kind: backend.KindToolUse, SessionID: s, Tool: "Edit", ToolCallID: "toolu_01F", Text: repo + "main.go"},
		{Kind: backend.KindToolUse, SessionID: s, Tool: "Bash", ToolCallID: "toolu_01G", Text: "go test ./..."},
		{Kind: backend.KindToolResult, SessionID: s, Tool: "MultiEdit", ToolCallID: "toolu_01D", Text: "Applied 0 edits."},
		{Kind: backend.KindToolResult, SessionID: s, Tool: "NotebookEdit", ToolCallID: "toolu_01E", Text: "Updated cell."},
		{Kind: backend.KindToolResult, SessionID: s, Tool: "Edit", ToolCallID: "toolu_01F", Text: "The file " + repo + "main.go has been updated successfully."},
		{Kind: backend.KindToolResult, SessionID: s, Tool: "Bash", ToolCallID: "toolu_01G", Text: "ok  \texample.com/repo\t0.01s"},
		{Kind: backend.KindText, SessionID: s, Text: "Fixed the bug: main now calls run()."},
		{Kind: backend.KindResult, SessionID: s, Text: "Fixed the bug: main now calls run()."},
	}
	if !reflect.DeepEqual(events, wantEvents) {
		t.Errorf("events:\n%+v\nwant\n%+v", events, wantEvents)
	}
	want := backend.Result{
		SessionID: s, Output: "Fixed the bug: main now calls run().", CostUSD: 0.0421, DurationMS: 8660,
		// 1,200 fresh, 800 written to the prompt cache, 30,000 read from it.
		NumTurns: 4, InputTokens: 32000, OutputTokens: 340,
		ToolsUsed: []string{"Read", "Edit", "Write", "MultiEdit", "NotebookEdit", "Bash"},
		// notes.md is not there: its Write failed.
		FilesModified: []string{repo + "main.go", repo + "util.go", repo + "a.ipynb"},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("result:\n%+v\nwant\n%+v", res, want)
	}
}

// TestSuccessIsIsErrorNotSubtype pins the rule of the architecture: is_error
// decides, subtype never does.
func TestSuccessIsIsErrorNotSubtype(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, line string
		isError    bool
		output     string
	}{
		{name: "error subtype, is_error false", line: `{"type":"result","subtype":"error_max_turns","is_error":false,"result":"partial answer","session_id":"s"}`, output: "partial answer"},
		{name: "success subtype, is_error true", line: `{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 overloaded","session_id":"s"}`, isError: true, output: "API Error: 500 overloaded"},
		{name: "error without text", line: `{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s"}`, isError: true, output: "claude failed (error_max_turns) with exit code 1"},
		{name: "errors list", line: `{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["first",2,"second"],"session_id":"s"}`, isError: true, output: "first; second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, res := parse(t, []byte(tt.line), 1, "")
			if res.IsError != tt.isError || res.Output != tt.output || res.Err != nil || res.SessionID != "s" {
				t.Errorf("result = %+v, want IsError %v, Output %q, no Err, session s", res, tt.isError, tt.output)
			}
		})
	}
}

// TestNoResult is a CLI that died before its result event.
func TestNoResult(t *testing.T) {
	t.Parallel()
	init := `{"type":"system","subtype":"init","session_id":"6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"}` + "\n" +
		`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Write","input":{"file_path":"/r/half.txt"}}]},"session_id":"6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"}`
	tests := []struct {
		name, stdout, stderr string
		exitCode             int
		session              string
		output               []string
		files                []string
	}{
		{
			name: "crash with stderr", stdout: init, stderr: "FATAL ERROR: JavaScript heap out of memory\n", exitCode: 134,
			session: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b", output: []string{"code 134", "heap out of memory"}, files: []string{"/r/half.txt"},
		},
		{name: "silent crash", exitCode: 1, output: []string{"code 1", "nothing to stderr"}},
		{
			name: "usage error", stderr: "Error: When using --print, --output-format=stream-json requires --verbose\n", exitCode: 1,
			output: []string{"requires --verbose"},
		},
		{
			name: "exit 0 without a result is still a failure", stdout: init, exitCode: 0,
			session: "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b", output: []string{"without a result"}, files: []string{"/r/half.txt"},
		},
		{name: "long stderr keeps its tail", stderr: strings.Repeat("é", 5000) + "the end", exitCode: 2, output: []string{"the end"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, res := parse(t, []byte(tt.stdout), tt.exitCode, tt.stderr)
			if !res.IsError || res.Err != nil || res.SessionID != tt.session || !reflect.DeepEqual(res.FilesModified, tt.files) {
				t.Errorf("result = %+v, want IsError, no Err, session %q, files %q", res, tt.session, tt.files)
			}
			for _, s := range tt.output {
				if !strings.Contains(res.Output, s) {
					t.Errorf("Output = %q, want it to contain %q", res.Output, s)
				}
			}
			if len(res.Output) > 3*maxStderr {
				t.Errorf("Output is %d bytes; stderr should be cut", len(res.Output))
			}
		})
	}
}

// TestNoise: what is not a known event yields nothing.
func TestNoise(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		"", "   ", "not json", "{", "[]", "null", "42", `"result"`, `{}`,
		`{"type":"no_such_event_type","session_id":"x"}`,
		`{"type":"system","subtype":"api_retry","attempt":1}`,
		`{"type":42}`, `{"type":"assistant"}`, `{"type":"assistant","message":"text"}`,
		`{"type":"assistant","message":{"content":"plain"}}`,
		`{"type":"user","message":{"role":"user","content":"the prompt"}}`,
		`{"type":"user","message":{"content":[{"type":"text","text":"[Request interrupted by user]"}]}}`,
		"\xff\xfe{\"type\":\"result\"}",
	} {
		if ev := New(Config{}).NewParser(backend.Request{}).Line([]byte(line)); len(ev) != 0 {
			t.Errorf("Line(%q) = %+v, want nothing", line, ev)
		}
	}
}

// TestOddFieldsDoNotHideAResult: a field of an unexpected type is dropped,
// not the whole event.
func TestOddFieldsDoNotHideAResult(t *testing.T) {
	t.Parallel()
	_, res := parse(t, []byte(`{"type":"result","is_error":false,"result":"done","session_id":"s","num_turns":"three","usage":[],"total_cost_usd":0.5}`), 0, "")
	if res.IsError || res.Output != "done" || res.CostUSD != 0.5 || res.NumTurns != 0 {
		t.Errorf("result = %+v, want success with output done and cost 0.5", res)
	}
}

// Input tokens add up the prompt cache's counts; the agent's counts are
// untrusted, so the sum saturates and a negative count adds nothing.
func TestInputTokensSaturate(t *testing.T) {
	t.Parallel()
	for usage, want := range map[string]int64{
		`{"input_tokens":5,"cache_creation_input_tokens":7,"cache_read_input_tokens":11}`:                                    23,
		`{"input_tokens":9000000000000000000,"cache_creation_input_tokens":9000000000000000000,"cache_read_input_tokens":1}`: math.MaxInt64,
		`{"input_tokens":-5,"cache_read_input_tokens":3}`:                                                                    3,
	} {
		_, res := parse(t, []byte(`{"type":"result","is_error":false,"result":"done","session_id":"s","usage":`+usage+`}`), 0, "")
		if res.InputTokens != want {
			t.Errorf("usage %s: input tokens %d, want %d", usage, res.InputTokens, want)
		}
	}
}
