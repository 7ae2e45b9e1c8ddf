package command

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestCommand(t *testing.T) {
	t.Parallel()
	agent := Config{
		Argv:       []string{"my-agent", "--cwd", "{repository}", "--model", "{model}", "--prompt={task}"},
		ResumeArgv: []string{"my-agent", "resume", "{session_id}", "-m{model}", "--", "{task}"},
	}
	tests := []struct {
		name string
		cfg  Config
		req  backend.Request
		want []string
		err  error
	}{
		{
			name: "new session",
			cfg:  agent,
			req:  backend.Request{Repository: "/w/r", Task: "fix it", Settings: backend.Settings{Model: "big"}},
			want: []string{"my-agent", "--cwd", "/w/r", "--model", "big", "--prompt=fix it"},
		},
		{
			name: "no model drops the flag and its value",
			cfg:  agent,
			req:  backend.Request{Repository: "/w/r", Task: "fix it"},
			want: []string{"my-agent", "--cwd", "/w/r", "--prompt=fix it"},
		},
		{
			name: "resume",
			cfg:  agent,
			req:  backend.Request{Task: "go on", SessionID: "s-1.2_x", Settings: backend.Settings{Model: "big"}},
			want: []string{"my-agent", "resume", "s-1.2_x", "-mbig", "--", "go on"},
		},
		{
			name: "resume without a model drops only the argument with {model}",
			cfg:  agent,
			req:  backend.Request{Task: "go on", SessionID: "s1"},
			want: []string{"my-agent", "resume", "s1", "--", "go on"},
		},
		{
			name: "placeholders in values are not expanded again",
			cfg:  Config{Argv: []string{"a", "{task}", "{repository}"}},
			req:  backend.Request{Task: "say {repository} and {session_id}", Repository: "/r"},
			want: []string{"a", "say {repository} and {session_id}", "/r"},
		},
		{
			name: "a flag before a plain value stays",
			cfg:  Config{Argv: []string{"a", "--verbose", "--model={model}", "{task}"}},
			req:  backend.Request{Task: "t"},
			want: []string{"a", "--verbose", "t"},
		},
		{
			name: "a value is one argument whatever it holds",
			cfg:  Config{Argv: []string{"a", "{task}"}},
			req:  backend.Request{Task: "x; rm -rf / $(reboot) `id` --help"},
			want: []string{"a", "x; rm -rf / $(reboot) `id` --help"},
		},
		{name: "resume unsupported", cfg: Config{Argv: []string{"a", "{task}"}}, req: backend.Request{Task: "t", SessionID: "s1"}, err: ErrResumeUnsupported},
		{name: "flag as session id", cfg: agent, req: backend.Request{Task: "t", SessionID: "--all"}, err: ErrInvalidSessionID},
		{name: "session id with a slash", cfg: agent, req: backend.Request{Task: "t", SessionID: "../x"}, err: ErrInvalidSessionID},
		{
			name: "custom session pattern",
			cfg:  Config{Argv: []string{"a"}, ResumeArgv: []string{"a", "{session_id}"}, SessionIDPattern: `^ses_[a-z]+$`},
			req:  backend.Request{Task: "t", SessionID: "s1"},
			err:  ErrInvalidSessionID,
		},
		{name: "no argv", cfg: Config{}, req: backend.Request{Task: "t"}, err: ErrInvalidConfig},
		{name: "placeholder as executable", cfg: Config{Argv: []string{"{task}"}}, req: backend.Request{Task: "t"}, err: ErrInvalidConfig},
		{name: "bad output", cfg: Config{Argv: []string{"a"}, Output: "xml"}, req: backend.Request{Task: "t"}, err: ErrInvalidConfig},
		{name: "bad pattern", cfg: Config{Argv: []string{"a"}, SessionIDPattern: "("}, req: backend.Request{Task: "t"}, err: ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := New(tt.cfg).Command(tt.req)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Command() error = %v, want %v", err, tt.err)
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

// A resume this agent cannot do, or a session id of another shape, is the
// request's fault: mesh-exec says invalid_argument, not that it failed.
func TestRequestErrorsAreRefusals(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Argv: []string{"agent", "{task}"}}).Command(backend.Request{Task: "t", SessionID: "s1"})
	if !errors.Is(err, ErrResumeUnsupported) || !errors.Is(err, backend.ErrRequestRefused) {
		t.Errorf("a resume without ResumeArgv: %v, want ErrResumeUnsupported and backend.ErrRequestRefused", err)
	}
	_, err = New(Config{Argv: []string{"agent", "{task}"}, ResumeArgv: []string{"agent", "--resume", "{session_id}"}}).Command(backend.Request{Task: "t", SessionID: "-rf"})
	if !errors.Is(err, backend.ErrRequestRefused) {
		t.Errorf("a session id of another shape: %v, want backend.ErrRequestRefused", err)
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	if got := New(Config{}).Name(); got != "command" {
		t.Errorf("Name() = %q", got)
	}
}

// A new run's argv and parser both take the id the runner gave the run
// (Request.NewSessionID), whichever is made first; a Command without one
// (nothing runs it) gets a fresh UUID.
func TestNewSessionID(t *testing.T) {
	t.Parallel()
	b := New(Config{Argv: []string{"agent", "--session", "{session_id}", "{task}"}})
	idOf := func(argv []string) string { return argv[2] }
	sessionOf := func(p backend.Parser) string { return p.Finish(0, "").SessionID }
	for _, id := range []string{"0b7a3c1e-6a39-4d43-9d5f-3f2b8c1d2e4f", "5d1f6a2b-7c3e-4f80-a1b2-c3d4e5f60718"} {
		req := backend.Request{Repository: "/r", Task: "same task", NewSessionID: id}
		p := b.NewParser(req)
		argv, err := b.Command(req)
		if err != nil || idOf(argv) != id || sessionOf(p) != id {
			t.Errorf("run %s: argv %q (%v), parser %q", id, argv, err, sessionOf(p))
		}
	}
	argv, _ := b.Command(backend.Request{Task: "t"})
	if !uuidRe.MatchString(idOf(argv)) {
		t.Errorf("generated id %q is not a UUID v4", idOf(argv))
	}
}

func TestResumedParserKeepsTheSession(t *testing.T) {
	t.Parallel()
	b := New(Config{Argv: []string{"a"}, ResumeArgv: []string{"a", "{session_id}"}})
	if got := b.NewParser(backend.Request{SessionID: "s9"}).Finish(0, "").SessionID; got != "s9" {
		t.Errorf("SessionID = %q", got)
	}
}

func TestTextParser(t *testing.T) {
	t.Parallel()
	b := New(Config{Argv: []string{"a"}, ResumeArgv: []string{"a", "{session_id}"}})
	p := b.NewParser(backend.Request{SessionID: "s1"})
	events := backendtest.FeedFile(t, p, "text.txt")
	want := []backend.Kind{backend.KindInit, backend.KindText, backend.KindText, backend.KindText}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("kinds = %v, want %v", got, want)
	}
	if events[0].SessionID != "s1" || events[3].Text != "I changed it to return a + b.\n" {
		t.Errorf("events = %+v", events)
	}
	res := p.Finish(0, "")
	wantOut := "Reading the repository...\n\nThe bug is in add.go: Add subtracted.\nI changed it to return a + b."
	if res.IsError || res.Output != wantOut || res.SessionID != "s1" {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestJSONLParser(t *testing.T) {
	t.Parallel()
	b := New(Config{Argv: []string{"a"}, Output: "jsonl"})
	p := b.NewParser(backend.Request{Task: "jsonl"})
	events := backendtest.FeedFile(t, p, "run.jsonl")
	want := []backend.Kind{backend.KindInit, backend.KindText, backend.KindText, backend.KindResult}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("kinds = %v, want %v", got, want)
	}
	res := p.Finish(0, "")
	if res.IsError || res.Output != "Fixed Add in add.go." || res.SessionID != "run-2026-05-02.7" {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestJSONLParserFailed(t *testing.T) {
	t.Parallel()
	p := New(Config{Argv: []string{"a"}, Output: "jsonl"}).NewParser(backend.Request{Task: "failed"})
	events := backendtest.FeedFile(t, p, "failed.jsonl")
	if last := events[len(events)-1]; last.Kind != backend.KindResult || !last.IsError {
		t.Errorf("last event = %+v", last)
	}
	// The agent's verdict wins over a zero exit code.
	if res := p.Finish(0, "noise"); !res.IsError || res.Output != "the model API refused the key" || res.SessionID != "run-2026-05-02.8" {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestJSONLParserNestedFields(t *testing.T) {
	t.Parallel()
	b := New(Config{
		Argv:   []string{"a"},
		Output: "jsonl",
		Fields: Fields{SessionID: "data.session.id", Text: "data.content", Result: "data.answer", IsError: "data.failed"},
	})
	p := b.NewParser(backend.Request{Task: "nested"})
	backendtest.FeedFile(t, p, "nested.jsonl")
	if res := p.Finish(0, ""); res.IsError || res.Output != "All done." || res.SessionID != "abc123" {
		t.Errorf("Finish() = %+v", res)
	}
}

// TestFinishWithoutResult: a run that printed no result line (text mode
// never does) answers with what it printed when it exits 0; otherwise it is
// an error explained by stderr, the output's tail or the exit code.
func TestFinishWithoutResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		output  string // the configured Output: "" for text, or "jsonl"
		lines   []string
		exit    int
		stderr  string
		want    string
		isError bool
	}{
		{name: "text: stderr first", lines: []string{"partial"}, exit: 2, stderr: "\x1b[31merror:\x1b[0m no API key\n", want: "error: no API key", isError: true},
		{name: "text: stdout when stderr is empty", lines: []string{"partial", "answer"}, exit: 1, want: "partial\nanswer", isError: true},
		{name: "text: exit code when nothing", exit: 3, want: "the agent exited with code 3", isError: true},

		{name: "jsonl: exit 0: the text is the answer", output: "jsonl", lines: []string{`{"text":"a"}`, `{"text":"b"}`}, want: "ab"},
		{name: "jsonl: exit 1: stderr", output: "jsonl", lines: []string{`{"text":"a"}`}, exit: 1, stderr: "boom\n", want: "boom", isError: true},
		{name: "jsonl: an error line without result", output: "jsonl", lines: []string{`{"is_error":true,"text":"quota"}`}, exit: 0, want: "quota", isError: true},
		{name: "jsonl: an error without a message: stderr", output: "jsonl", lines: []string{`{"is_error":true}`}, exit: 3, stderr: "rate limited\n", want: "rate limited", isError: true},
		{name: "jsonl: an error without a message or stderr", output: "jsonl", lines: []string{`{"is_error":true}`}, exit: 3, want: "the agent reported an error (exit code 3)", isError: true},
		{name: "jsonl: exit 2 without stderr: the text's tail", output: "jsonl", lines: []string{`{"text":"half an answer"}`}, exit: 2, want: "half an answer", isError: true},
		{name: "jsonl: exit 2, no output", output: "jsonl", exit: 2, want: "the agent exited with code 2", isError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := New(Config{Argv: []string{"a"}, Output: tt.output}).NewParser(backend.Request{Task: tt.name})
			for _, l := range tt.lines {
				p.Line([]byte(l))
			}
			if res := p.Finish(tt.exit, tt.stderr); res.IsError != tt.isError || res.Output != tt.want {
				t.Errorf("Finish() = %+v, want output %q, IsError %v", res, tt.want, tt.isError)
			}
		})
	}
}

func TestJSONLParserIgnoresNoise(t *testing.T) {
	t.Parallel()
	p := New(Config{Argv: []string{"a"}, Output: "jsonl"}).NewParser(backend.Request{Task: "noise"})
	for _, line := range []string{"", "text", "{", "[1]", `{"text":42}`, `{"session_id":7}`, `{"is_error":"yes"}`, `{"other":"x"}`} {
		if got := p.Line([]byte(line)); len(got) != 0 {
			t.Errorf("Line(%q) = %+v, want nothing", line, got)
		}
	}
}

func FuzzTextParser(f *testing.F) {
	f.Add([]byte("hello"), 0, "")
	f.Add([]byte{0xff, 0xfe, '\n'}, 1, "\x1b[0m")
	b := New(Config{Argv: []string{"a"}})
	f.Fuzz(func(t *testing.T, line []byte, exitCode int, stderr string) {
		p := b.NewParser(backend.Request{SessionID: "s"})
		p.Line(line)
		p.Line(line)
		if res := p.Finish(exitCode, stderr); res.IsError != (exitCode != 0) {
			t.Errorf("IsError = %v for exit code %d", res.IsError, exitCode)
		}
	})
}

func FuzzJSONLParser(f *testing.F) {
	for _, name := range []string{"run.jsonl", "failed.jsonl", "nested.jsonl"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			f.Add([]byte(line), 0)
		}
	}
	backends := []*Backend{
		New(Config{Argv: []string{"a"}, Output: "jsonl"}),
		New(Config{Argv: []string{"a"}, Output: "jsonl", Fields: Fields{SessionID: "a.b", Text: "a", Result: "a.b.c", IsError: ".."}}),
	}
	f.Fuzz(func(t *testing.T, line []byte, exitCode int) {
		for _, b := range backends {
			p := b.NewParser(backend.Request{SessionID: "s"})
			p.Line(line)
			p.Line(line)
			p.Finish(exitCode, string(line))
		}
	})
}
