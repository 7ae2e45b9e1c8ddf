package command

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/fakeagenttest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/script"
)

func TestMain(m *testing.M) { fakeagenttest.Main(m) }

// These tests configure the backend for the fake's plain agent
// (testdata/fakeagents, --as=command), which takes its session id on the
// command line, in text and in jsonl mode.

func textAgent(bin string) Config {
	return Config{
		Argv:       []string{bin, "--as=command", "--session", "{session_id}", "--model", "{model}", "--", "{task}"},
		ResumeArgv: []string{bin, "--as=command", "--resume", "{session_id}", "--", "{task}"},
	}
}

func jsonlAgent(bin string) Config {
	return Config{
		Argv:       []string{bin, "--as=command", "--jsonl", "--", "{task}"},
		ResumeArgv: []string{bin, "--as=command", "--jsonl", "--resume={session_id}", "--", "{task}"},
		Output:     "jsonl",
	}
}

// modes are the fake's plain agent in either output mode, by the mode's
// name: the tests that hold for both run once for each.
func modes(bin string) map[string]Config {
	return map[string]Config{"text": textAgent(bin), "jsonl": jsonlAgent(bin)}
}

func steps(s ...script.Step) *script.Script {
	return &script.Script{Runs: []script.Run{{Steps: s}}}
}

func TestFakeSessions(t *testing.T) {
	t.Parallel()
	bin := fakeagenttest.Binary(t, "agent")
	for name, cfg := range modes(bin) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := New(cfg)
			home, repo := t.TempDir(), t.TempDir()
			first := fakeagenttest.Run(t, b, home, backend.Request{Repository: repo, Task: "--remember 7"}, steps(script.Step{Reply: "noted"}))
			if first.Result.IsError || first.Result.Output != "noted" || first.Result.SessionID == "" {
				t.Fatalf("first run: %+v\nstderr: %s", first.Result, first.Stderr)
			}
			second := fakeagenttest.Run(t, b, home, backend.Request{Repository: repo, Task: "what?", SessionID: first.Result.SessionID}, steps(script.Step{Recall: true}))
			if second.Result.IsError || second.Result.SessionID != first.Result.SessionID || second.Result.Output != "previous prompt: --remember 7" {
				t.Fatalf("second run: %+v\nstderr: %s", second.Result, second.Stderr)
			}
			unknown := fakeagenttest.Run(t, b, home, backend.Request{Repository: repo, Task: "x", SessionID: "no-such-session"}, steps(script.Step{Reply: "never"}))
			if !unknown.Result.IsError || unknown.Result.Output != "agent: no such session: no-such-session" {
				t.Errorf("unknown session: %+v", unknown.Result)
			}
		})
	}
}

func TestFakeTextRun(t *testing.T) {
	t.Parallel()
	b := New(textAgent(fakeagenttest.Binary(t, "agent")))
	repo := t.TempDir()
	p := fakeagenttest.Run(t, b, t.TempDir(), backend.Request{Repository: repo, Task: "fix", Settings: backend.Settings{Model: "big"}}, steps(
		script.Step{Unknown: true},
		script.Step{Edit: &script.Edit{Path: "a/b.txt", Content: "hi"}},
		script.Step{Reply: "line one"},
		script.Step{Reply: "line two"},
	))
	if p.Result.IsError || p.Result.Output != "line one\nline two" {
		t.Fatalf("result: %+v\nstderr: %s", p.Result, p.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(repo, "a", "b.txt")); err != nil || string(data) != "hi" {
		t.Errorf("edited file: %q, %v", data, err)
	}
	if p.Argv[4] != "--model" || p.Argv[5] != "big" {
		t.Errorf("argv = %q", p.Argv)
	}
}

func TestFakeFailure(t *testing.T) {
	t.Parallel()
	bin := fakeagenttest.Binary(t, "agent")
	for name, cfg := range modes(bin) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := fakeagenttest.Run(t, New(cfg), t.TempDir(), backend.Request{Repository: t.TempDir(), Task: "x"},
				steps(script.Step{Reply: "trying"}, script.Step{Fail: "the model is down"}))
			if !p.Result.IsError || p.ExitCode != 1 {
				t.Fatalf("result: %+v, exit %d", p.Result, p.ExitCode)
			}
			want := map[string]string{"text": "agent: the model is down", "jsonl": "the model is down"}[name]
			if p.Result.Output != want {
				t.Errorf("Output = %q, want %q", p.Result.Output, want)
			}
		})
	}
}

func TestResumeRefusedWithoutResumeArgv(t *testing.T) {
	t.Parallel()
	b := New(Config{Argv: []string{"agent", "{task}"}})
	if _, err := b.Command(backend.Request{Task: "t", SessionID: "s1"}); !errors.Is(err, ErrResumeUnsupported) {
		t.Errorf("Command() error = %v", err)
	}
}
