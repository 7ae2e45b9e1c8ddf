package opencode

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

// These tests run the backend against the fake opencode (testdata/fakeagents),
// which parses argv as `opencode run` does and refuses unknown flags, so they
// check the argv as much as the parser.

func TestFakeResumeContinuesTheSession(t *testing.T) {
	t.Parallel()
	b := New(Config{Binary: fakeagenttest.Binary(t, "opencode")})
	home, repo := t.TempDir(), t.TempDir()

	first := fakeagenttest.Run(t, b, home, backend.Request{Repository: repo, Task: "remember the number 7"}, script.Reply("noted"))
	if first.Result.IsError || first.Result.Output != "noted" || !sessionPattern.MatchString(first.Result.SessionID) {
		t.Fatalf("first run: %+v\nstderr: %s", first.Result, first.Stderr)
	}
	recall := &script.Script{Runs: []script.Run{{Steps: []script.Step{{Recall: true}}}}}
	req := backend.Request{Repository: repo, Task: "what was it?", SessionID: first.Result.SessionID, Model: "anthropic/claude-sonnet-4-5"}
	second := fakeagenttest.Run(t, b, home, req, recall)
	if second.Result.IsError || second.Result.SessionID != first.Result.SessionID {
		t.Fatalf("second run: %+v\nstderr: %s", second.Result, second.Stderr)
	}
	if want := "previous prompt: remember the number 7"; second.Result.Output != want {
		t.Errorf("resumed output = %q, want %q", second.Result.Output, want)
	}
	if second.Result.CostUSD <= 0 {
		t.Errorf("CostUSD = %v, want the step's cost", second.Result.CostUSD)
	}
}

func TestFakeTasksThatLookLikeArguments(t *testing.T) {
	t.Parallel()
	bin := fakeagenttest.Binary(t, "opencode")
	for _, task := range []string{"--help", "-s ses_x", "--format text"} {
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
	b := New(Config{Binary: fakeagenttest.Binary(t, "opencode")})
	repo := t.TempDir()
	sc := &script.Script{Runs: []script.Run{{Steps: []script.Step{
		{Unknown: true},
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
	if want := []string{"bash", "write"}; !slices.Equal(p.Result.ToolsUsed, want) {
		t.Errorf("ToolsUsed = %q, want %q", p.Result.ToolsUsed, want)
	}
}

func TestFakeFailures(t *testing.T) {
	t.Parallel()
	bin := fakeagenttest.Binary(t, "opencode")
	t.Run("session error", func(t *testing.T) {
		t.Parallel()
		sc := &script.Script{Runs: []script.Run{{Steps: []script.Step{{Reply: "trying"}, {Fail: "the model is overloaded"}}}}}
		p := fakeagenttest.Run(t, New(Config{Binary: bin}), t.TempDir(), backend.Request{Repository: t.TempDir(), Task: "x"}, sc)
		if !p.Result.IsError || p.Result.Output != "the model is overloaded" || p.ExitCode != 1 {
			t.Errorf("result: %+v, exit %d", p.Result, p.ExitCode)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		t.Parallel()
		req := backend.Request{Repository: t.TempDir(), Task: "x", SessionID: "ses_000000000000000000000000ab"}
		p := fakeagenttest.Run(t, New(Config{Binary: bin}), t.TempDir(), req, script.Reply("never"))
		if !p.Result.IsError || !errors.Is(p.Result.Err, backend.ErrSessionNotFound) || p.Result.SessionID != req.SessionID {
			t.Errorf("result: %+v", p.Result)
		}
		if p.Result.Output != "Error: Session not found" {
			t.Errorf("Output = %q, want opencode's message without colours", p.Result.Output)
		}
	})
}
