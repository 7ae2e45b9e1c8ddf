package gemini

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

const sessionID = "4df9d202-a0c2-4ec6-8144-8f2876aebd90"

func TestCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		req  backend.Request
		want []string
		err  string
	}{
		{name: "new session", req: backend.Request{Task: "fix it"}, want: []string{"gemini", "--output-format=stream-json", "--approval-mode=yolo", "--prompt=fix it"}},
		{
			name: "resume with a model",
			req:  backend.Request{Task: "go on", SessionID: sessionID, Model: "gemini-2.5-pro"},
			want: []string{"gemini", "--output-format=stream-json", "--approval-mode=yolo", "--model=gemini-2.5-pro", "--resume=" + sessionID, "--prompt=go on"},
		},
		{
			name: "a task that looks like a flag stays inside --prompt=",
			req:  backend.Request{Task: "--yolo\n-p x"},
			want: []string{"gemini", "--output-format=stream-json", "--approval-mode=yolo", "--prompt=--yolo\n-p x"},
		},
		{
			name: "config",
			cfg:  Config{Binary: "/opt/gemini", ApprovalMode: "auto_edit", SkipTrust: true},
			req:  backend.Request{Task: "t"},
			want: []string{"/opt/gemini", "--output-format=stream-json", "--approval-mode=auto_edit", "--skip-trust", "--prompt=t"},
		},
		{
			name: "unsupported fields are left out",
			req:  backend.Request{Task: "t", AllowedTools: []string{"read_file"}, MaxTurns: 4, AppendSystemPrompt: "x", MCPConfig: "/m.json"},
			want: []string{"gemini", "--output-format=stream-json", "--approval-mode=yolo", "--prompt=t"},
		},
		{name: "latest is not an id", req: backend.Request{Task: "t", SessionID: "latest"}, err: "not a UUID"},
		{name: "flag as session id", req: backend.Request{Task: "t", SessionID: "--yolo"}, err: "not a UUID"},
		{name: "uuid with a suffix", req: backend.Request{Task: "t", SessionID: sessionID + " -y"}, err: "not a UUID"},
		{name: "empty task", req: backend.Request{Task: "\n"}, err: "empty"},
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
	if got := New(Config{}).Name(); got != "gemini" {
		t.Errorf("Name() = %q", got)
	}
}

// run feeds a testdata stream to a parser. The streams are reconstructed from
// Gemini CLI's documentation (docs/cli/headless.md, output/types.ts), not
// captured; see testdata/README.md.
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
		backend.KindText, backend.KindText,
		backend.KindToolUse, backend.KindToolResult, // read_file
		backend.KindToolUse, backend.KindToolResult, // replace
		backend.KindToolUse, backend.KindToolResult, // shell, failed
		backend.KindToolUse, backend.KindToolResult, // write_file, refused
		backend.KindText, backend.KindText,
		backend.KindResult,
	}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, wantKinds) {
		t.Fatalf("kinds = %v\nwant %v", got, wantKinds)
	}
	if e := events[5]; e.Tool != "replace" || !strings.Contains(e.Text, "a - b") {
		t.Errorf("replace tool use = %+v", e)
	}
	if e := events[8]; !e.IsError || e.Tool != "run_shell_command" || e.Text != "Command exited with code 1" {
		t.Errorf("failed shell result = %+v", e)
	}
	if e := events[13]; e.IsError || e.SessionID != sessionID || e.Text != "Fixed Add in calc/add.go; the test passes now." {
		t.Errorf("result event = %+v", e)
	}
	want := backend.Result{
		SessionID:     sessionID,
		Output:        "Fixed Add in calc/add.go; the test passes now.",
		DurationMS:    4200,
		InputTokens:   10100,
		OutputTokens:  130,
		ToolsUsed:     []string{"read_file", "replace", "run_shell_command", "write_file"},
		FilesModified: []string{"/workspace/calc/add.go"},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Finish() =\n%+v\nwant\n%+v", res, want)
	}
}

func TestParserResume(t *testing.T) {
	t.Parallel()
	_, res := run(t, "resume.jsonl", backend.Request{SessionID: sessionID}, 0, "")
	if res.IsError || res.Output != "I changed Add to return a + b." || res.SessionID != sessionID {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestParserResultError(t *testing.T) {
	t.Parallel()
	events, res := run(t, "result_error.jsonl", backend.Request{}, 53, "")
	if e := events[len(events)-1]; e.Kind != backend.KindResult || !e.IsError || e.Text != "Reached max session turns for this session." {
		t.Errorf("result event = %+v", e)
	}
	if !res.IsError || res.Output != "Reached max session turns for this session." || res.InputTokens != 450 || res.Err != nil {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestFinishWithoutResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		req    backend.Request
		exit   int
		lines  []string
		stderr string
		output string
		err    error
	}{
		{
			name:   "unknown session",
			req:    backend.Request{SessionID: sessionID},
			exit:   1,
			stderr: "Error resuming session: Invalid session identifier \"" + sessionID + "\".\nSearched for sessions in /home/agent/.gemini/tmp/x/chats.\n",
			output: "Error resuming session: Invalid session identifier \"" + sessionID + "\".\nSearched for sessions in /home/agent/.gemini/tmp/x/chats.",
			err:    backend.ErrSessionNotFound,
		},
		{
			name:   "no credentials",
			exit:   1,
			stderr: "Please set an Auth method in your /home/agent/.gemini/settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA\n",
			output: "Please set an Auth method in your /home/agent/.gemini/settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA",
			err:    backend.ErrNotLoggedIn,
		},
		{name: "turn limit", exit: 53, output: "gemini exited with code 53 without a result (turn limit exceeded)"},
		{
			name:   "an error event beats stderr",
			exit:   1,
			lines:  []string{`{"type":"error","severity":"error","message":"quota exceeded"}`},
			stderr: "stack trace\n",
			output: "quota exceeded",
		},
		{
			name:   "a warning is the last resort",
			exit:   1,
			lines:  []string{`{"type":"error","severity":"warning","message":"model fell back to flash"}`},
			output: "model fell back to flash",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := New(Config{}).NewParser(tt.req)
			for _, l := range tt.lines {
				p.Line([]byte(l))
			}
			res := p.Finish(tt.exit, tt.stderr)
			if !res.IsError || res.Output != tt.output || !errors.Is(res.Err, tt.err) || (tt.err == nil && res.Err != nil) {
				t.Errorf("Finish() = %+v\nwant output %q, err %v", res, tt.output, tt.err)
			}
			if res.SessionID != tt.req.SessionID {
				t.Errorf("SessionID = %q", res.SessionID)
			}
		})
	}
}

func TestParserIgnoresNoise(t *testing.T) {
	t.Parallel()
	p := New(Config{}).NewParser(backend.Request{})
	for _, line := range []string{
		"", "Loaded cached credentials.", "{", "[]", `{"type":"init"}`, `{"type":"message","role":"user","content":"hi"}`,
		`{"type":"message","role":"assistant"}`, `{"type":"tool_use"}`, `{"type":"error"}`, `{"type":"stats"}`,
		`{"type":"message","content":42}`,
	} {
		if got := p.Line([]byte(line)); len(got) != 0 {
			t.Errorf("Line(%q) = %+v, want nothing", line, got)
		}
	}
}

func FuzzParser(f *testing.F) {
	for _, name := range []string{"new_session.jsonl", "result_error.jsonl", "resume.jsonl"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			f.Add([]byte(line), 0)
		}
	}
	f.Add([]byte(`{"type":"tool_result","tool_id":"x","status":"success"}`), 0)
	f.Add([]byte(`{"type":"result","status":"success","stats":{"input_tokens":1e300,"duration_ms":-5}}`), 0)
	f.Fuzz(func(t *testing.T, line []byte, exitCode int) {
		p := New(Config{}).NewParser(backend.Request{})
		p.Line(line)
		p.Line(line)
		res := p.Finish(exitCode, string(line))
		if res.InputTokens < 0 || res.OutputTokens < 0 || res.DurationMS < 0 {
			t.Errorf("negative counts: %+v", res)
		}
	})
}
