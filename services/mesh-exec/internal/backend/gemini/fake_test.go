package gemini

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/fakeagenttest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/script"
)

func TestMain(m *testing.M) { fakeagenttest.Main(m) }

// These tests run the backend against the fake gemini (testdata/fakeagents),
// which parses argv as Gemini CLI does (a resume needs --prompt, unknown
// flags are refused), so they check the argv as much as the parser.

func TestFakeResumeContinuesTheSession(t *testing.T) {
	t.Parallel()
	b := New(Config{Binary: fakeagenttest.Binary(t, "gemini")})
	home, repo := t.TempDir(), t.TempDir()

	first := fakeagenttest.Run(t, b, home, backend.Request{Repository: repo, Task: "remember the number 7"}, script.Reply("noted, the number 7"))
	if first.Result.IsError || first.Result.Output != "noted, the number 7" || !uuidPattern.MatchString(first.Result.SessionID) {
		t.Fatalf("first run: %+v\nstderr: %s", first.Result, first.Stderr)
	}
	recall := &script.Script{Runs: []script.Run{{Steps: []script.Step{{Recall: true}}}}}
	req := backend.Request{Repository: repo, Task: "what was it?", SessionID: first.Result.SessionID, Model: "gemini-2.5-flash"}
	second := fakeagenttest.Run(t, b, home, req, recall)
	if second.Result.IsError || second.Result.SessionID != first.Result.SessionID {
		t.Fatalf("second run: %+v\nstderr: %s", second.Result, second.Stderr)
	}
	if want := "previous prompt: remember the number 7"; second.Result.Output != want {
		t.Errorf("resumed output = %q, want %q", second.Result.Output, want)
	}
}

func TestFakeTasksThatLookLikeArguments(t *testing.T) {
	t.Parallel()
	bin := fakeagenttest.Binary(t, "gemini")
	for _, task := range []string{"--help", "-y", "--resume=latest", "x\n--prompt=y"} {
		t.Run(task, func(t *testing.T) {
			t.Parallel()
			sc := &script.Script{Runs: []script.Run{{Task: task, Steps: []script.Step{{Reply: "got it"}}}}}
			p := fakeagenttest.Run(t, New(Config{Binary: bin}), t.TempDir(), backend.Request{Repository: t.TempDir(), Task: task}, sc)
			if p.Result.IsError || p.Result.Output != "got it" {
				t.Errorf("task %q: %+v\nstderr: %s", task, p.Result, p.Stderr)
			}
		})
	}
}

func TestFakeEditCommandAndNoise(t *testing.T) {
	t.Parallel()
	b := New(Config{Binary: fakeagenttest.Binary(t, "gemini"), SkipTrust: true})
	repo := t.TempDir()
	sc := &script.Script{Runs: []script.Run{{Steps: []script.Step{
		{Unknown: true},
		{Reply: "Let me check."},
		{Command: &script.Command{Line: "go test ./...", Output: "FAIL", ExitCode: 1}},
		{Edit: &script.Edit{Path: "pkg/add.go", Content: "package pkg\n"}},
		{Reply: "fixed"},
	}}}}
	p := fakeagenttest.Run(t, b, t.TempDir(), backend.Request{Repository: repo, Task: "fix"}, sc)
	if p.Result.IsError || p.Result.Output != "fixed" {
		t.Fatalf("result: %+v\nstderr: %s", p.Result, p.Stderr)
	}
	if data, err := os.ReadFile(filepath.Join(repo, "pkg", "add.go")); err != nil || string(data) != "package pkg\n" {
		t.Errorf("edited file: %q, %v", data, err)
	}
	if len(p.Result.FilesModified) != 1 || !strings.HasSuffix(p.Result.FilesModified[0], filepath.Join("pkg", "add.go")) {
		t.Errorf("FilesModified = %q", p.Result.FilesModified)
	}
	if want := []string{"run_shell_command", "write_file"}; !slices.Equal(p.Result.ToolsUsed, want) {
		t.Errorf("ToolsUsed = %q, want %q", p.Result.ToolsUsed, want)
	}
}

func TestFakeFailures(t *testing.T) {
	t.Parallel()
	bin := fakeagenttest.Binary(t, "gemini")
	t.Run("error result", func(t *testing.T) {
		t.Parallel()
		sc := &script.Script{Runs: []script.Run{{Steps: []script.Step{{Reply: "trying"}, {Fail: "the model is overloaded"}}}}}
		p := fakeagenttest.Run(t, New(Config{Binary: bin}), t.TempDir(), backend.Request{Repository: t.TempDir(), Task: "x"}, sc)
		if !p.Result.IsError || p.Result.Output != "the model is overloaded" || p.ExitCode != 1 {
			t.Errorf("result: %+v, exit %d", p.Result, p.ExitCode)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		t.Parallel()
		req := backend.Request{Repository: t.TempDir(), Task: "x", SessionID: "4df9d202-a0c2-4ec6-8144-000000000000"}
		p := fakeagenttest.Run(t, New(Config{Binary: bin}), t.TempDir(), req, script.Reply("never"))
		if !p.Result.IsError || !errors.Is(p.Result.Err, backend.ErrSessionNotFound) || p.Result.SessionID != req.SessionID {
			t.Errorf("result: %+v", p.Result)
		}
	})
}
