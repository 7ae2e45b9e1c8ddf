package jsonstream

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/fakeagenttest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/script"
)

func TestMain(m *testing.M) { fakeagenttest.Main(m) }

// The session ids of the fixtures (testdata/<cli>), which are reconstructed
// from each CLI's documentation and source, not captured; see
// testdata/<cli>/README.md.
const (
	codexSession    = "0199a213-81c0-7800-8aa1-bbab2a035a53"
	geminiSession   = "4df9d202-a0c2-4ec6-8144-8f2876aebd90"
	opencodeSession = "ses_494719016ffe85dkDMj0FPRbHK"
)

// feed gives a testdata stream to a parser of cli and finishes it.
func feed(t *testing.T, cli CLI, file string, req backend.Request, exitCode int, stderr string) ([]backend.Event, backend.Result) {
	t.Helper()
	p := New(cli, "").NewParser(req)
	events := backendtest.FeedFile(t, p, file)
	return events, p.Finish(exitCode, stderr)
}

// withFlags is cli with other fixed flags: a release that spells them
// differently.
func withFlags(cli CLI, flags ...string) CLI {
	cli.Flags = flags
	return cli
}

// TestParserNewSession feeds every CLI's fixture of a new session
// (testdata/<cli>/new_session.jsonl) to its parser: the kinds of the events in
// order, the events that show how the CLI's own are normalized, and the
// whole result.
func TestParserNewSession(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cli   CLI
		kinds []backend.Kind
		// events are the events at these places, whole.
		events map[int]backend.Event
		// result is the whole result; its CostUSD is compared to within 1e-9.
		result backend.Result
	}{
		{
			cli: Codex(),
			kinds: []backend.Kind{
				backend.KindInit,
				backend.KindToolUse, backend.KindToolResult, // go test fails
				backend.KindText,
				backend.KindToolUse, backend.KindToolResult, // file change
				backend.KindToolUse, backend.KindToolResult, // mcp
				backend.KindToolUse, backend.KindToolResult, // go test passes (no item.started)
				backend.KindText,
				backend.KindResult,
			},
			events: map[int]backend.Event{
				0: {Kind: backend.KindInit, SessionID: codexSession},
				2: {Kind: backend.KindToolResult, Tool: "command_execution", ToolCallID: "item_1", Text: "--- FAIL: TestAdd\nFAIL\n", IsError: true},
				6: {Kind: backend.KindToolUse, Tool: "mcp__docs__search", ToolCallID: "item_4", Text: `{"q":"Add"}`},
				7: {Kind: backend.KindToolResult, Tool: "mcp__docs__search", ToolCallID: "item_4", Text: "Add returns a+b."},
			},
			result: backend.Result{
				SessionID:     codexSession,
				Output:        "Fixed Add in add.go and added a test; go test passes.",
				NumTurns:      1,
				InputTokens:   24763,
				OutputTokens:  122,
				ToolsUsed:     []string{"command_execution", "file_change", "mcp__docs__search"},
				FilesModified: []string{"/workspace/calc/add.go", "/workspace/calc/add_test.go"},
			},
		},
		{
			cli: Gemini(),
			kinds: []backend.Kind{
				backend.KindInit,
				backend.KindText, backend.KindText,
				backend.KindToolUse, backend.KindToolResult, // read_file
				backend.KindToolUse, backend.KindToolResult, // replace
				backend.KindToolUse, backend.KindToolResult, // shell, failed
				backend.KindToolUse, backend.KindToolResult, // write_file, refused
				backend.KindText, backend.KindText,
				backend.KindResult,
			},
			events: map[int]backend.Event{
				0: {Kind: backend.KindInit, SessionID: geminiSession},
				5: {
					Kind: backend.KindToolUse, Tool: "replace", ToolCallID: "replace-1746180002000-2",
					Text: `{"file_path":"/workspace/calc/add.go","old_string":"a - b","new_string":"a + b"}`,
				},
				8:  {Kind: backend.KindToolResult, Tool: "run_shell_command", ToolCallID: "run_shell_command-1746180002200-3", Text: "Command exited with code 1", IsError: true},
				13: {Kind: backend.KindResult, SessionID: geminiSession, Text: "Fixed Add in calc/add.go; the test passes now."},
			},
			result: backend.Result{
				SessionID:     geminiSession,
				Output:        "Fixed Add in calc/add.go; the test passes now.",
				DurationMS:    4200,
				InputTokens:   10100,
				OutputTokens:  130,
				ToolsUsed:     []string{"read_file", "replace", "run_shell_command", "write_file"},
				FilesModified: []string{"/workspace/calc/add.go"},
			},
		},
		{
			cli: OpenCode(),
			kinds: []backend.Kind{
				backend.KindInit,
				backend.KindText,
				backend.KindToolUse, backend.KindToolResult, // read
				backend.KindToolUse, backend.KindToolResult, // edit
				backend.KindToolUse, backend.KindToolResult, // bash, failed
				backend.KindText,
				backend.KindResult,
			},
			events: map[int]backend.Event{
				0: {Kind: backend.KindInit, SessionID: opencodeSession},
				2: {Kind: backend.KindToolUse, Tool: "read", ToolCallID: "call_Kap3tANM5Uu9U5raX0ogDuYu", Text: "calc/add_test.go"},
				7: {Kind: backend.KindToolResult, Tool: "bash", ToolCallID: "call_3", Text: "Error: command exited with code 1", IsError: true},
				9: {Kind: backend.KindResult, SessionID: opencodeSession, Text: "Fixed Add in calc/add.go: it now returns a + b."},
			},
			result: backend.Result{
				SessionID:     opencodeSession,
				Output:        "Fixed Add in calc/add.go: it now returns a + b.",
				CostUSD:       0.0254,
				NumTurns:      3,
				InputTokens:   7952 + 8100 + 200,
				OutputTokens:  35 + 60 + 18,
				ToolsUsed:     []string{"read", "edit", "bash"},
				FilesModified: []string{"/workspace/calc/add.go"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.cli.Name, func(t *testing.T) {
			t.Parallel()
			events, res := feed(t, tt.cli, tt.cli.Name+"/new_session.jsonl", backend.Request{}, 0, "")
			if got := backendtest.Kinds(events); !reflect.DeepEqual(got, tt.kinds) {
				t.Fatalf("kinds = %v\nwant %v", got, tt.kinds)
			}
			for i, want := range tt.events {
				if !reflect.DeepEqual(events[i], want) {
					t.Errorf("event %d = %+v\nwant %+v", i, events[i], want)
				}
			}
			if math.Abs(res.CostUSD-tt.result.CostUSD) > 1e-9 {
				t.Errorf("CostUSD = %v, want %v", res.CostUSD, tt.result.CostUSD)
			}
			res.CostUSD = tt.result.CostUSD
			if !reflect.DeepEqual(res, tt.result) {
				t.Errorf("Finish() =\n%+v\nwant\n%+v", res, tt.result)
			}
		})
	}
}

// A run names its session once: an init event the first time the CLI
// names it and again only when the id changes; an empty id names nothing. A
// resumed run knows its id and has not reported it yet.
func TestNameSession(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		resumed string   // the id a resumed run starts with
		ids     []string // what the CLI names, in order
		want    []string // the ids of the init events reported
	}{
		{name: "named once", ids: []string{"a"}, want: []string{"a"}},
		{name: "named on every line", ids: []string{"a", "a", "a"}, want: []string{"a"}},
		{name: "empty names nothing", ids: []string{"", "a", ""}, want: []string{"a"}},
		{name: "a new id is reported", ids: []string{"a", "b", "b"}, want: []string{"a", "b"}},
		{name: "resumed: reported once", resumed: "a", ids: []string{"a", "a"}, want: []string{"a"}},
		{name: "never named", ids: []string{"", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Run{SessionID: tt.resumed}
			var got []string
			for _, id := range tt.ids {
				for _, ev := range r.NameSession(id) {
					if ev.Kind != backend.KindInit {
						t.Fatalf("NameSession(%q) gave a %s event", id, ev.Kind)
					}
					got = append(got, ev.SessionID)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("init events for %q = %q, want %q", tt.ids, got, tt.want)
			}
			if last := tt.want; len(last) > 0 && r.SessionID != last[len(last)-1] {
				t.Errorf("SessionID = %q, want %q", r.SessionID, last[len(last)-1])
			}
		})
	}
}

// An error the CLI reports along the way is an error event and the run's
// last error; a warning is kept apart; empty messages are neither.
func TestReportErrorAndWarn(t *testing.T) {
	t.Parallel()
	r := &Run{}
	if evs := r.ReportError(""); len(evs) != 0 || r.LastError != "" {
		t.Fatalf("ReportError(\"\") = %v, LastError %q; want nothing", evs, r.LastError)
	}
	evs := r.ReportError("rate limited")
	if len(evs) != 1 || evs[0].Kind != backend.KindError || !evs[0].IsError || evs[0].Text != "rate limited" {
		t.Fatalf("ReportError = %+v, want one error event", evs)
	}
	r.Warn("")
	r.Warn("deprecated flag")
	r.Warn("")
	if r.LastError != "rate limited" || r.Warning != "deprecated flag" {
		t.Errorf("LastError %q, Warning %q", r.LastError, r.Warning)
	}
}

// TestParserResume feeds the fixtures of a resumed session
// (testdata/<cli>/resume.jsonl): the run answers in the session it resumed, and
// costs nothing, as these CLIs report no price. Codex's run succeeds after an
// error it retried.
func TestParserResume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cli             CLI
		session, output string
	}{
		{cli: Codex(), session: codexSession, output: "You asked me to fix Add; that is done."},
		{cli: Gemini(), session: geminiSession, output: "I changed Add to return a + b."},
	}
	for _, tt := range tests {
		t.Run(tt.cli.Name, func(t *testing.T) {
			t.Parallel()
			_, res := feed(t, tt.cli, tt.cli.Name+"/resume.jsonl", backend.Request{SessionID: tt.session}, 0, "")
			if res.IsError || res.Output != tt.output || res.SessionID != tt.session {
				t.Errorf("Finish() = %+v", res)
			}
			if res.CostUSD != 0 {
				t.Errorf("CostUSD = %v, want 0: %s reports no price", res.CostUSD, tt.cli.Name)
			}
		})
	}
}

func TestCommand(t *testing.T) {
	t.Parallel()
	codex := []string{"codex", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"}
	gemini := []string{"gemini", "--output-format=stream-json", "--approval-mode=yolo"}
	opencode := []string{"opencode", "run", "--format", "json", "--auto"}
	with := func(base []string, extra ...string) []string { return append(slices.Clone(base), extra...) }
	unsupported := backend.Request{Task: "t", Settings: backend.Settings{AllowedTools: []string{"Read"}, MaxTurns: 3, AppendSystemPrompt: "x", MCPConfig: "/m.json"}}
	tests := []struct {
		name   string
		cli    CLI
		binary string
		req    backend.Request
		want   []string
		err    string
	}{
		{name: "codex: new session", cli: Codex(), req: backend.Request{Task: "fix the test"}, want: with(codex, "--", "fix the test")},
		{name: "codex: model", cli: Codex(), req: backend.Request{Task: "t", Settings: backend.Settings{Model: "gpt-5-codex"}}, want: with(codex, "--model=gpt-5-codex", "--", "t")},
		{
			name: "codex: resume puts the flags before the subcommand", cli: Codex(),
			req:  backend.Request{Task: "go on", SessionID: codexSession, Settings: backend.Settings{Model: "gpt-5"}},
			want: with(codex, "--model=gpt-5", "resume", codexSession, "--", "go on"),
		},
		{name: "codex: a task that looks like a flag stays the prompt", cli: Codex(), req: backend.Request{Task: "--help"}, want: with(codex, "--", "--help")},
		{name: "codex: a task that names a subcommand stays the prompt", cli: Codex(), req: backend.Request{Task: "review"}, want: with(codex, "--", "review")},
		{name: "codex: unsupported fields are left out", cli: Codex(), req: unsupported, want: with(codex, "--", "t")},
		{name: "codex: binary", cli: Codex(), binary: "/opt/codex/bin/codex", req: backend.Request{Task: "t"}, want: append([]string{"/opt/codex/bin/codex"}, with(codex, "--", "t")[1:]...)},
		{name: "codex: flag as session id", cli: Codex(), req: backend.Request{Task: "t", SessionID: "--last"}, err: "not a UUID"},
		{name: "codex: thread name as session id", cli: Codex(), req: backend.Request{Task: "t", SessionID: "my-thread"}, err: "not a UUID"},
		{name: "codex: empty task", cli: Codex(), req: backend.Request{Task: "  "}, err: "codex: the task is empty"},
		{name: "codex: stdin task", cli: Codex(), req: backend.Request{Task: "-"}, err: "stdin"},

		{name: "gemini: new session", cli: Gemini(), req: backend.Request{Task: "fix it"}, want: with(gemini, "--prompt=fix it")},
		{
			name: "gemini: resume with a model", cli: Gemini(),
			req:  backend.Request{Task: "go on", SessionID: geminiSession, Settings: backend.Settings{Model: "gemini-2.5-pro"}},
			want: with(gemini, "--model=gemini-2.5-pro", "--resume="+geminiSession, "--prompt=go on"),
		},
		{name: "gemini: a task that looks like a flag stays inside --prompt=", cli: Gemini(), req: backend.Request{Task: "--yolo\n-p x"}, want: with(gemini, "--prompt=--yolo\n-p x")},
		{
			name: "gemini: other flags", cli: withFlags(Gemini(), "--output-format=stream-json", "--approval-mode=auto_edit", "--skip-trust"), binary: "/opt/gemini",
			req:  backend.Request{Task: "t"},
			want: []string{"/opt/gemini", "--output-format=stream-json", "--approval-mode=auto_edit", "--skip-trust", "--prompt=t"},
		},
		{name: "gemini: unsupported fields are left out", cli: Gemini(), req: unsupported, want: with(gemini, "--prompt=t")},
		{name: "gemini: latest is not an id", cli: Gemini(), req: backend.Request{Task: "t", SessionID: "latest"}, err: "not a UUID"},
		{name: "gemini: flag as session id", cli: Gemini(), req: backend.Request{Task: "t", SessionID: "--yolo"}, err: "not a UUID"},
		{name: "gemini: uuid with a suffix", cli: Gemini(), req: backend.Request{Task: "t", SessionID: geminiSession + " -y"}, err: "not a UUID"},
		{name: "gemini: empty task", cli: Gemini(), req: backend.Request{Task: "\n"}, err: "empty"},

		{name: "opencode: new session", cli: OpenCode(), req: backend.Request{Task: "fix it"}, want: with(opencode, "--", "fix it")},
		{
			name: "opencode: resume with a model", cli: OpenCode(),
			req:  backend.Request{Task: "go on", SessionID: opencodeSession, Settings: backend.Settings{Model: "anthropic/claude-sonnet-4-5"}},
			want: with(opencode, "--model=anthropic/claude-sonnet-4-5", "--session="+opencodeSession, "--", "go on"),
		},
		{name: "opencode: model ids may contain more slashes", cli: OpenCode(), req: backend.Request{Task: "t", Settings: backend.Settings{Model: "openrouter/meta/llama-4"}}, want: with(opencode, "--model=openrouter/meta/llama-4", "--", "t")},
		{
			name: "opencode: older permission flag", cli: withFlags(OpenCode(), "run", "--format", "json", "--dangerously-skip-permissions"), binary: "/usr/local/bin/opencode",
			req:  backend.Request{Task: "t"},
			want: []string{"/usr/local/bin/opencode", "run", "--format", "json", "--dangerously-skip-permissions", "--", "t"},
		},
		{name: "opencode: a task that looks like a flag", cli: OpenCode(), req: backend.Request{Task: "-m x"}, want: with(opencode, "--", "-m x")},
		{name: "opencode: unsupported fields are left out", cli: OpenCode(), req: unsupported, want: with(opencode, "--", "t")},
		{name: "opencode: flag as session id", cli: OpenCode(), req: backend.Request{Task: "t", SessionID: "--continue"}, err: "ses_"},
		{name: "opencode: uuid as session id", cli: OpenCode(), req: backend.Request{Task: "t", SessionID: codexSession}, err: "ses_"},
		{name: "opencode: session id with a space", cli: OpenCode(), req: backend.Request{Task: "t", SessionID: "ses_a b"}, err: "ses_"},
		{name: "opencode: model without provider", cli: OpenCode(), req: backend.Request{Task: "t", Settings: backend.Settings{Model: "gpt-5"}}, err: "provider/model"},
		{name: "opencode: empty task", cli: OpenCode(), req: backend.Request{}, err: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := backendtest.CheckCommand(t, New(tt.cli, tt.binary), tt.req, tt.want, tt.err)
			if err != nil && tt.req.SessionID != "" && !errors.Is(err, ErrInvalidSessionID) {
				t.Errorf("Command() error = %v, want ErrInvalidSessionID", err)
			}
		})
	}
}

func TestEveryCLIIsDescribed(t *testing.T) {
	t.Parallel()
	var names []string
	for _, cli := range CLIs() {
		names = append(names, New(cli, "").Name())
		if cli.Model == nil || cli.Resume == nil || cli.Prompt == nil || cli.Session == nil || cli.SessionShape == "" || cli.NewDecoder == nil || cli.NoEnd == nil || len(cli.Rules) == 0 {
			t.Errorf("%s: the description is missing a part: %+v", cli.Name, cli)
		}
	}
	if want := []string{"codex", "opencode", "gemini"}; !slices.Equal(names, want) {
		t.Errorf("CLIs() = %q, want %q", names, want)
	}
}

// A run that never reached its end, or failed by its exit code: the result
// says why, with the CLI's own words first, and classifies it.
func TestFinishWithoutAnEnd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cli    CLI
		req    backend.Request
		exit   int
		lines  []string
		stderr string
		output string
		err    error
	}{
		{
			name: "codex: unknown session", cli: Codex(),
			req:    backend.Request{SessionID: codexSession},
			exit:   1,
			stderr: "Error: thread/resume: thread/resume failed: no rollout found for thread id " + codexSession + " (code -32600)\n",
			output: "Error: thread/resume: thread/resume failed: no rollout found for thread id " + codexSession + " (code -32600)",
			err:    backend.ErrSessionNotFound,
		},
		{name: "codex: nothing at all", cli: Codex(), exit: 2, output: "codex exited with code 2 without finishing a turn"},
		{name: "codex: exit 0 without a turn is still an error", cli: Codex(), exit: 0, output: "codex exited with code 0 without finishing a turn"},
		{
			name: "codex: stderr tail keeps the end", cli: Codex(),
			exit:   1,
			stderr: strings.Repeat("noise line\n", 100) + "the real reason\n",
			output: strings.TrimSpace(strings.Repeat("noise line\n", 19) + "the real reason"),
		},
		{
			name: "gemini: unknown session", cli: Gemini(),
			req:    backend.Request{SessionID: geminiSession},
			exit:   1,
			stderr: "Error resuming session: Invalid session identifier \"" + geminiSession + "\".\nSearched for sessions in /home/agent/.gemini/tmp/x/chats.\n",
			output: "Error resuming session: Invalid session identifier \"" + geminiSession + "\".\nSearched for sessions in /home/agent/.gemini/tmp/x/chats.",
			err:    backend.ErrSessionNotFound,
		},
		{
			name: "gemini: no credentials", cli: Gemini(),
			exit:   1,
			stderr: "Please set an Auth method in your /home/agent/.gemini/settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA\n",
			output: "Please set an Auth method in your /home/agent/.gemini/settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA",
			err:    backend.ErrNotLoggedIn,
		},
		{name: "gemini: turn limit", cli: Gemini(), exit: 53, output: "gemini exited with code 53 without a result (turn limit exceeded)"},
		{
			name: "gemini: an error event beats stderr", cli: Gemini(),
			exit:   1,
			lines:  []string{`{"type":"error","severity":"error","message":"quota exceeded"}`},
			stderr: "stack trace\n",
			output: "quota exceeded",
		},
		{
			name: "gemini: a warning is the last resort", cli: Gemini(),
			exit:   1,
			lines:  []string{`{"type":"error","severity":"warning","message":"model fell back to flash"}`},
			output: "model fell back to flash",
		},
		{
			name: "opencode: unknown session, colours stripped", cli: OpenCode(),
			req:    backend.Request{SessionID: opencodeSession},
			exit:   1,
			stderr: "\x1b[91m\x1b[1mError: \x1b[0mSession not found\n",
			output: "Error: Session not found",
			err:    backend.ErrSessionNotFound,
		},
		{name: "opencode: crash without stderr", cli: OpenCode(), exit: 137, output: "opencode exited with code 137"},
		{name: "opencode: exit 0 without a step", cli: OpenCode(), exit: 0, output: "opencode finished without completing a step"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := New(tt.cli, "").NewParser(tt.req)
			for _, l := range tt.lines {
				p.Line([]byte(l))
			}
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

func TestParsersIgnoreNoise(t *testing.T) {
	t.Parallel()
	common := []string{"", "   ", "not json", "{", "[1,2]", "null", `{"type":42}`, `{"type":"error"}`, `{"type":"unknown.event"}`}
	noise := map[string][]string{
		"codex": {
			`{"type":"item.completed"}`, `{"type":"item.completed","item":"nope"}`, `{"type":"thread.started"}`,
			`{"type":"item.completed","item":{"type":"reasoning","text":"hmm"}}`,
		},
		"gemini": {
			"Loaded cached credentials.", `{"type":"init"}`, `{"type":"message","role":"user","content":"hi"}`,
			`{"type":"message","role":"assistant"}`, `{"type":"tool_use"}`, `{"type":"stats"}`, `{"type":"message","content":42}`,
		},
		"opencode": {
			`{"type":"text"}`, `{"type":"text","part":"x"}`, `{"type":"tool_use","part":{"type":"tool"}}`,
			`{"type":"error","error":42}`, `{"type":"message.part.updated","properties":{}}`,
		},
	}
	for _, cli := range CLIs() {
		p := New(cli, "").NewParser(backend.Request{})
		for _, line := range append(common, noise[cli.Name]...) {
			if got := p.Line([]byte(line)); len(got) != 0 {
				t.Errorf("%s: Line(%q) = %+v, want nothing", cli.Name, line, got)
			}
		}
	}
}

// FuzzParsers gives every CLI's parser the same lines, seeded with every
// fixture: whatever a line holds, no parser panics, and no result has a
// negative or non-finite count or a success with an error class.
func FuzzParsers(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.jsonl"))
	if err != nil || len(files) == 0 {
		f.Fatalf("fixtures: %v, %v", files, err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			f.Add([]byte(line), 0)
		}
	}
	f.Add([]byte(`{"type":"item.completed","item":{"type":"command_execution","exit_code":1e400}}`), 1)
	f.Add([]byte(`{"type":"turn.completed","usage":{"input_tokens":-1e30}}`), 0)
	f.Add([]byte(`{"type":"tool_result","tool_id":"x","status":"success"}`), 0)
	f.Add([]byte(`{"type":"result","status":"success","stats":{"input_tokens":1e300,"duration_ms":-5}}`), 0)
	f.Add([]byte(`{"type":"step_finish","part":{"cost":1e308,"tokens":{"input":1e300}}}`), 0)
	f.Add([]byte(`{"type":"tool_use","part":{"tool":"write","state":{"status":"completed","input":{"filePath":7}}}}`), 0)
	f.Fuzz(func(t *testing.T, line []byte, exitCode int) {
		for _, cli := range CLIs() {
			p := New(cli, "").NewParser(backend.Request{})
			p.Line(line)
			p.Line(line) // a second time: state from the first must not break it
			res := p.Finish(exitCode, string(line))
			if res.InputTokens < 0 || res.OutputTokens < 0 || res.DurationMS < 0 || res.CostUSD < 0 || math.IsNaN(res.CostUSD) || math.IsInf(res.CostUSD, 0) {
				t.Errorf("%s: counts out of range: %+v", cli.Name, res)
			}
			if !res.IsError && res.Err != nil {
				t.Errorf("%s: a success with an error class: %+v", cli.Name, res)
			}
		}
	})
}

// fakeFacts is what differs between the CLIs in the tests that run the
// fake agents (testdata/fakeagents): each fake parses argv as its CLI does
// and refuses what it would refuse, so these tests check the argv as much
// as the parser.
type fakeFacts struct {
	cli CLI
	// model is one the CLI accepts; unknownSession has the CLI's shape.
	model, unknownSession string
	// argumentTasks are tasks that look like the CLI's flags or subcommands.
	argumentTasks []string
	// tools are the tool names of a command and a file edit.
	tools []string
	// unknownSessionOutput is in the result of a resume of an unknown
	// session, as the CLI says it.
	unknownSessionOutput string
	// reportsCost: the CLI reports what a run cost; turns, when set, is how
	// many turns it counts for one prompt.
	reportsCost bool
	turns       int
	// oneStep: the fake plays a whole run as one step, whose text is all
	// of the answer (so talk between calls is part of it).
	oneStep bool
}

var fakes = []fakeFacts{
	{
		cli: Codex(), model: "gpt-5", unknownSession: "0199a213-81c0-7800-8aa1-000000000000",
		argumentTasks:        []string{"--help", "resume", "review", "-m gpt", "line one\nline two"},
		tools:                []string{"command_execution", "file_change"},
		unknownSessionOutput: "no rollout found",
		turns:                1,
	},
	{
		cli: OpenCode(), model: "anthropic/claude-sonnet-4-5", unknownSession: "ses_000000000000000000000000ab",
		argumentTasks:        []string{"--help", "-s ses_x", "--format text"},
		tools:                []string{"bash", "write"},
		unknownSessionOutput: "Error: Session not found",
		reportsCost:          true,
		oneStep:              true,
	},
	{
		// --skip-trust, as a release with folder trust needs.
		cli: withFlags(Gemini(), "--output-format=stream-json", "--approval-mode=yolo", "--skip-trust"), model: "gemini-2.5-flash", unknownSession: "4df9d202-a0c2-4ec6-8144-000000000000",
		argumentTasks:        []string{"--help", "-y", "--resume=latest", "x\n--prompt=y"},
		tools:                []string{"run_shell_command", "write_file"},
		unknownSessionOutput: "Invalid session identifier",
	},
}

// TestConformance runs the backend conformance suite on every CLI with its
// fake standing in.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, f := range fakes {
		t.Run(f.cli.Name, func(t *testing.T) {
			t.Parallel()
			cli := fakeagenttest.Scripted(fakeagenttest.Binary(t, f.cli.Name))
			cli.UnknownSession = f.unknownSession
			backendtest.Exercise(t, New(f.cli, ""), cli)
		})
	}
}

func TestFakeResumeContinuesTheSession(t *testing.T) {
	t.Parallel()
	for _, f := range fakes {
		t.Run(f.cli.Name, func(t *testing.T) {
			t.Parallel()
			b := New(f.cli, fakeagenttest.Binary(t, f.cli.Name))
			home, repo := t.TempDir(), t.TempDir()
			first := fakeagenttest.Run(t, b, home, backend.Request{Repository: repo, Task: "remember the number 7"}, script.Reply("noted"))
			if first.Result.IsError || first.Result.Output != "noted" || !f.cli.Session.MatchString(first.Result.SessionID) {
				t.Fatalf("first run: %+v\nstderr: %s", first.Result, first.Stderr)
			}
			recall := &script.Script{Runs: []script.Run{{Steps: []script.Step{{Recall: true}}}}}
			req := backend.Request{Repository: repo, Task: "what was it?", SessionID: first.Result.SessionID, Settings: backend.Settings{Model: f.model}}
			second := fakeagenttest.Run(t, b, home, req, recall)
			if second.Result.IsError || second.Result.SessionID != first.Result.SessionID {
				t.Fatalf("second run: %+v\nstderr: %s", second.Result, second.Stderr)
			}
			if want := "previous prompt: remember the number 7"; second.Result.Output != want {
				t.Errorf("resumed output = %q, want %q", second.Result.Output, want)
			}
			if f.reportsCost && second.Result.CostUSD <= 0 {
				t.Errorf("CostUSD = %v, want the run's cost", second.Result.CostUSD)
			}
		})
	}
}

func TestFakeTasksThatLookLikeArguments(t *testing.T) {
	t.Parallel()
	for _, f := range fakes {
		bin := fakeagenttest.Binary(t, f.cli.Name)
		for _, task := range f.argumentTasks {
			t.Run(f.cli.Name+"/"+task, func(t *testing.T) {
				t.Parallel()
				sc := &script.Script{Runs: []script.Run{{Task: task, Steps: []script.Step{{Reply: "got it"}}}}}
				p := fakeagenttest.Run(t, New(f.cli, bin), t.TempDir(), backend.Request{Repository: t.TempDir(), Task: task}, sc)
				if p.Result.IsError || p.Result.Output != "got it" {
					t.Errorf("task %q: %+v\nstderr: %s", task, p.Result, p.Stderr)
				}
			})
		}
	}
}

// A run with an unknown event, a failing command, an edit, a warning on
// stderr and talk between the calls: the answer is the last reply, the edit
// is on disk and reported, and the tools are named as the CLI names them.
func TestFakeEditCommandAndNoise(t *testing.T) {
	t.Parallel()
	for _, f := range fakes {
		t.Run(f.cli.Name, func(t *testing.T) {
			t.Parallel()
			repo := t.TempDir()
			steps := []script.Step{
				{Unknown: true},
				{Reply: "Let me check."},
				{Command: &script.Command{Line: "go test ./...", Output: "FAIL", ExitCode: 1}},
				{Edit: &script.Edit{Path: "pkg/add.go", Content: "package pkg\n"}},
				{Stderr: "a warning on stderr"},
				{Reply: "fixed"},
			}
			if f.oneStep {
				steps = slices.Delete(steps, 1, 2)
			}
			sc := &script.Script{Runs: []script.Run{{Steps: steps}}}
			p := fakeagenttest.Run(t, New(f.cli, fakeagenttest.Binary(t, f.cli.Name)), t.TempDir(), backend.Request{Repository: repo, Task: "fix"}, sc)
			if p.Result.IsError || p.Result.Output != "fixed" {
				t.Fatalf("result: %+v\nstderr: %s", p.Result, p.Stderr)
			}
			if data, err := os.ReadFile(filepath.Join(repo, "pkg", "add.go")); err != nil || string(data) != "package pkg\n" {
				t.Errorf("edited file: %q, %v", data, err)
			}
			if len(p.Result.FilesModified) != 1 || !strings.HasSuffix(p.Result.FilesModified[0], filepath.Join("pkg", "add.go")) {
				t.Errorf("FilesModified = %q", p.Result.FilesModified)
			}
			if !slices.Equal(p.Result.ToolsUsed, f.tools) {
				t.Errorf("ToolsUsed = %q, want %q", p.Result.ToolsUsed, f.tools)
			}
			if f.turns != 0 && (p.Result.NumTurns != f.turns || p.Result.InputTokens == 0) {
				t.Errorf("usage: %+v", p.Result)
			}
		})
	}
}

func TestFakeFailures(t *testing.T) {
	t.Parallel()
	for _, f := range fakes {
		bin := fakeagenttest.Binary(t, f.cli.Name)
		t.Run(f.cli.Name+"/failed", func(t *testing.T) {
			t.Parallel()
			sc := &script.Script{Runs: []script.Run{{Steps: []script.Step{{Reply: "trying"}, {Fail: "the model is overloaded"}}}}}
			p := fakeagenttest.Run(t, New(f.cli, bin), t.TempDir(), backend.Request{Repository: t.TempDir(), Task: "x"}, sc)
			if !p.Result.IsError || p.Result.Output != "the model is overloaded" || p.ExitCode != 1 {
				t.Errorf("result: %+v, exit %d", p.Result, p.ExitCode)
			}
		})
		t.Run(f.cli.Name+"/unknown session", func(t *testing.T) {
			t.Parallel()
			req := backend.Request{Repository: t.TempDir(), Task: "x", SessionID: f.unknownSession}
			p := fakeagenttest.Run(t, New(f.cli, bin), t.TempDir(), req, script.Reply("never"))
			if !p.Result.IsError || !errors.Is(p.Result.Err, backend.ErrSessionNotFound) || p.Result.SessionID != req.SessionID {
				t.Errorf("result: %+v", p.Result)
			}
			if !strings.Contains(p.Result.Output, f.unknownSessionOutput) {
				t.Errorf("Output = %q, want the CLI's own message (%q)", p.Result.Output, f.unknownSessionOutput)
			}
		})
	}
}

// OpenCode's output is the agent's: however many and however long its text
// parts and errors, the parser keeps a bounded answer (the step's end) and
// a bounded failure.
func TestOpenCodeKeepsBoundedText(t *testing.T) {
	t.Parallel()
	part := strings.Repeat("x", 512<<10)
	p := New(OpenCode(), "").NewParser(backend.Request{})
	p.Line([]byte(`{"type":"step_start","sessionID":"ses_1"}`))
	for i := range 20 { // 10 MiB
		b, _ := json.Marshal(map[string]any{"type": "text", "sessionID": "ses_1", "part": map[string]any{"type": "text", "text": part + strconv.Itoa(i)}})
		p.Line(b)
	}
	p.Line([]byte(`{"type":"step_finish","sessionID":"ses_1","part":{"type":"step-finish"}}`))
	res := p.Finish(0, "")
	if len(res.Output) > maxStepBytes+len(part)+100 || !strings.HasSuffix(res.Output, "19") {
		t.Errorf("an answer of 10 MiB of parts kept %d bytes, ending %q; want at most about %d, the last part's", len(res.Output), res.Output[max(0, len(res.Output)-10):], maxStepBytes)
	}

	p = New(OpenCode(), "").NewParser(backend.Request{})
	for range 2 * maxErrors {
		b, _ := json.Marshal(map[string]any{"type": "error", "sessionID": "ses_1", "error": map[string]any{"name": "E", "data": map[string]any{"message": part[:64<<10]}}})
		p.Line(b)
	}
	res = p.Finish(1, "")
	if bound := maxErrors * (maxErrorText + len("…") + 1); !res.IsError || len(res.Output) > bound {
		t.Errorf("%d errors of 64 KiB: is_error %v, a failure of %d bytes; want at most %d", 2*maxErrors, res.IsError, len(res.Output), bound)
	}
}
