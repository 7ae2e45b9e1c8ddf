package opencode

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

const sessionID = "ses_494719016ffe85dkDMj0FPRbHK"

func TestCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		req  backend.Request
		want []string
		err  string
	}{
		{name: "new session", req: backend.Request{Task: "fix it"}, want: []string{"opencode", "run", "--format", "json", "--auto", "--", "fix it"}},
		{
			name: "resume with a model",
			req:  backend.Request{Task: "go on", SessionID: sessionID, Model: "anthropic/claude-sonnet-4-5"},
			want: []string{"opencode", "run", "--format", "json", "--auto", "--model=anthropic/claude-sonnet-4-5", "--session=" + sessionID, "--", "go on"},
		},
		{
			name: "model ids may contain more slashes",
			req:  backend.Request{Task: "t", Model: "openrouter/meta/llama-4"},
			want: []string{"opencode", "run", "--format", "json", "--auto", "--model=openrouter/meta/llama-4", "--", "t"},
		},
		{
			name: "older permission flag",
			cfg:  Config{Binary: "/usr/local/bin/opencode", PermissionFlag: "--dangerously-skip-permissions"},
			req:  backend.Request{Task: "t"},
			want: []string{"/usr/local/bin/opencode", "run", "--format", "json", "--dangerously-skip-permissions", "--", "t"},
		},
		{name: "no permission flag", cfg: Config{PermissionFlag: "none"}, req: backend.Request{Task: "t"}, want: []string{"opencode", "run", "--format", "json", "--", "t"}},
		{name: "a task that looks like a flag", req: backend.Request{Task: "-m x"}, want: []string{"opencode", "run", "--format", "json", "--auto", "--", "-m x"}},
		{
			name: "unsupported fields are left out",
			req:  backend.Request{Task: "t", AllowedTools: []string{"bash"}, MaxTurns: 2, AppendSystemPrompt: "x", MCPConfig: "/m.json"},
			want: []string{"opencode", "run", "--format", "json", "--auto", "--", "t"},
		},
		{name: "flag as session id", req: backend.Request{Task: "t", SessionID: "--continue"}, err: "ses_"},
		{name: "uuid as session id", req: backend.Request{Task: "t", SessionID: "0199a213-81c0-7800-8aa1-bbab2a035a53"}, err: "ses_"},
		{name: "session id with a space", req: backend.Request{Task: "t", SessionID: "ses_a b"}, err: "ses_"},
		{name: "model without provider", req: backend.Request{Task: "t", Model: "gpt-5"}, err: "provider/model"},
		{name: "empty task", req: backend.Request{}, err: "empty"},
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
	if got := New(Config{}).Name(); got != "opencode" {
		t.Errorf("Name() = %q", got)
	}
}

// run feeds a testdata stream to a parser. The streams are reconstructed from
// OpenCode's source (run.ts, message-v2.ts) and docs, not captured; see
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
		backend.KindText,
		backend.KindToolUse, backend.KindToolResult, // read
		backend.KindToolUse, backend.KindToolResult, // edit
		backend.KindToolUse, backend.KindToolResult, // bash, failed
		backend.KindText,
		backend.KindResult,
	}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, wantKinds) {
		t.Fatalf("kinds = %v\nwant %v", got, wantKinds)
	}
	if events[0].SessionID != sessionID {
		t.Errorf("init = %+v", events[0])
	}
	if e := events[2]; e.Tool != "read" || e.Text != "calc/add_test.go" {
		t.Errorf("read tool use = %+v", e)
	}
	if e := events[7]; !e.IsError || e.Tool != "bash" || e.Text != "Error: command exited with code 1" {
		t.Errorf("failed bash result = %+v", e)
	}
	if e := events[9]; e.Text != "Fixed Add in calc/add.go: it now returns a + b." {
		t.Errorf("result event = %+v", e)
	}
	want := backend.Result{
		SessionID:     sessionID,
		Output:        "Fixed Add in calc/add.go: it now returns a + b.",
		NumTurns:      3,
		InputTokens:   7952 + 8100 + 200,
		OutputTokens:  35 + 60 + 18,
		ToolsUsed:     []string{"read", "edit", "bash"},
		FilesModified: []string{"/workspace/calc/add.go"},
	}
	cost := res.CostUSD
	res.CostUSD = 0
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Finish() =\n%+v\nwant\n%+v", res, want)
	}
	if math.Abs(cost-0.0254) > 1e-9 {
		t.Errorf("CostUSD = %v, want 0.0254", cost)
	}
}

func TestParserOldReleaseWithoutDone(t *testing.T) {
	t.Parallel()
	_, res := run(t, "old_release.jsonl", backend.Request{}, 0, "")
	if res.IsError || res.Output != "OK" || res.SessionID != "ses_6aade4081ffe216ygZUgcUQdR1" || res.InputTokens != 14217 {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestParserError(t *testing.T) {
	t.Parallel()
	events, res := run(t, "error.jsonl", backend.Request{}, 1, "")
	if last := events[len(events)-1]; last.Kind != backend.KindError || last.Text != "Invalid API key" {
		t.Errorf("last event = %+v", last)
	}
	if !res.IsError || res.Output != "Invalid API key" || !errors.Is(res.Err, backend.ErrNotLoggedIn) {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestFinishWithoutEvents(t *testing.T) {
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
			name:   "unknown session, colours stripped",
			req:    backend.Request{SessionID: sessionID},
			exit:   1,
			stderr: "\x1b[91m\x1b[1mError: \x1b[0mSession not found\n",
			output: "Error: Session not found",
			err:    backend.ErrSessionNotFound,
		},
		{name: "crash without stderr", exit: 137, output: "opencode exited with code 137"},
		{name: "exit 0 without a step", exit: 0, output: "opencode finished without completing a step"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := New(Config{}).NewParser(tt.req).Finish(tt.exit, tt.stderr)
			if !res.IsError || res.Output != tt.output || !errors.Is(res.Err, tt.err) || (tt.err == nil && res.Err != nil) {
				t.Errorf("Finish() = %+v\nwant output %q, err %v", res, tt.output, tt.err)
			}
			if res.SessionID != tt.req.SessionID {
				t.Errorf("SessionID = %q", res.SessionID)
			}
		})
	}
}

func TestParserNonZeroExitAfterSteps(t *testing.T) {
	t.Parallel()
	_, res := run(t, "old_release.jsonl", backend.Request{}, 1, "killed\n")
	if !res.IsError || res.Output != "killed" {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestParserIgnoresNoise(t *testing.T) {
	t.Parallel()
	p := New(Config{}).NewParser(backend.Request{})
	for _, line := range []string{
		"", "not json", "{", "[]", `{"type":"text"}`, `{"type":"text","part":"x"}`,
		`{"type":"tool_use","part":{"type":"tool"}}`, `{"type":"error"}`, `{"type":"error","error":42}`,
		`{"type":"message.part.updated","properties":{}}`,
	} {
		if got := p.Line([]byte(line)); len(got) != 0 {
			t.Errorf("Line(%q) = %+v, want nothing", line, got)
		}
	}
}

func FuzzParser(f *testing.F) {
	for _, name := range []string{"new_session.jsonl", "error.jsonl", "old_release.jsonl"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			f.Add([]byte(line), 0)
		}
	}
	f.Add([]byte(`{"type":"step_finish","part":{"cost":1e308,"tokens":{"input":1e300}}}`), 0)
	f.Add([]byte(`{"type":"tool_use","part":{"tool":"write","state":{"status":"completed","input":{"filePath":7}}}}`), 0)
	f.Fuzz(func(t *testing.T, line []byte, exitCode int) {
		p := New(Config{}).NewParser(backend.Request{})
		p.Line(line)
		p.Line(line)
		res := p.Finish(exitCode, string(line))
		if res.CostUSD < 0 || math.IsNaN(res.CostUSD) || math.IsInf(res.CostUSD, 0) {
			t.Errorf("CostUSD = %v", res.CostUSD)
		}
	})
}
