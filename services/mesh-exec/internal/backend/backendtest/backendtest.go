// Package backendtest is the conformance suite of backend.Backend. Every
// backend's tests call [Exercise] with the backend and a scripted stand-in
// for its CLI (a fake binary that follows a script instead of calling a
// model; see [Scripted]). The suite runs real processes the way mesh-exec's
// runner does (argv from Command, cwd the repository, stdin /dev/null, a
// fresh HOME, stdout line by line into the parser, then Finish) and checks
// what mesh-exec relies on:
//
//   - a run answers: no error, the reply in Output, an init event before
//     the result event, and a session id that a second run resumes;
//   - a resume of a session the CLI does not have is ErrSessionNotFound;
//   - a file the agent writes is on disk and in FilesModified, with its
//     tool in ToolsUsed;
//   - a failing run is IsError with the CLI's message in Output;
//   - events of unknown types are ignored;
//   - the task reaches the CLI as one argument, never through a shell;
//   - Finish without any output is an error result.
//
// Scenarios ([Scenario]) are generic, so every backend's fake can play
// them; [Run] is exported for backends' own tests of their fakes.
package backendtest

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Exercise runs the conformance suite against b, whose CLI is played by
// cli. The cases run in parallel, each with its own repository and HOME.
func Exercise(t *testing.T, b backend.Backend, cli Scripted) {
	t.Helper()
	if cli.Script == nil || cli.Env == nil {
		t.Fatal("backendtest: Scripted.Script and Scripted.Env are required")
	}
	setup := func(t *testing.T) *bundle {
		t.Helper()
		t.Parallel()
		return &bundle{b: b, cli: cli, home: t.TempDir(), repo: t.TempDir()}
	}

	t.Run("Name", func(t *testing.T) {
		t.Parallel()
		if b.Name() == "" {
			t.Error("Name() is empty")
		}
	})

	t.Run("NewSessionThenResume", func(t *testing.T) {
		x := setup(t)
		// Shell syntax that would leave files behind if the task went
		// through a shell, starting with "-" as a flag would.
		task := "-x $(touch pwned1) `touch pwned2`; echo 'a' \"b\" > pwned3 && exit 7 | * ~"
		first := x.run(t, backend.Request{Task: task}, Reply("first answer "+token()))
		x.wantSuccess(t, first, "first answer")
		for _, f := range []string{"pwned1", "pwned2", "pwned3"} {
			if _, err := os.Stat(filepath.Join(x.repo, f)); err == nil {
				t.Errorf("the task ran in a shell: %s exists (argv %q)", f, first.Argv)
			}
		}
		if !slices.ContainsFunc(first.Argv[1:], func(a string) bool { return strings.HasSuffix(a, task) }) {
			t.Errorf("argv %q has no argument holding the task %q", first.Argv, task)
		}
		if cli.Sessionless {
			if first.Result.SessionID != "" {
				t.Errorf("SessionID = %q for a CLI without sessions", first.Result.SessionID)
			}
			if _, err := b.Command(backend.Request{Repository: x.repo, Task: "again", SessionID: "any"}); err == nil {
				t.Error("Command accepted a resume for a CLI without sessions")
			}
			return
		}
		if first.Result.SessionID == "" {
			t.Fatalf("the first run returned no session id (events %+v)", first.Events)
		}
		second := x.run(t, backend.Request{Task: "go on", SessionID: first.Result.SessionID}, Reply("second answer "+token()))
		x.wantSuccess(t, second, "second answer")
		if second.Result.SessionID != first.Result.SessionID {
			t.Errorf("the resumed run returned session %q, want %q", second.Result.SessionID, first.Result.SessionID)
		}
	})

	if cli.UnknownSession != "" && !cli.Sessionless {
		t.Run("ResumeUnknownSession", func(t *testing.T) {
			x := setup(t)
			p := x.run(t, backend.Request{Task: "go on", SessionID: cli.UnknownSession}, Reply("never said"))
			if !p.Result.IsError {
				t.Fatalf("resuming an unknown session succeeded: %+v", p.Result)
			}
			if !errors.Is(p.Result.Err, backend.ErrSessionNotFound) {
				t.Errorf("Err = %v, want ErrSessionNotFound (output %q, stderr %q)", p.Result.Err, p.Result.Output, p.Stderr)
			}
			if p.Result.Output == "" {
				t.Error("Output is empty; it should say what went wrong")
			}
		})
	}

	t.Run("EditFile", func(t *testing.T) {
		x := setup(t)
		rel := "notes/conformance.txt"
		content := "written by the conformance suite " + token() + "\n"
		p := x.run(t, backend.Request{Task: "write the notes"}, EditFile(rel, content))
		x.wantSuccess(t, p, "wrote "+rel)
		got, err := os.ReadFile(filepath.Join(x.repo, rel))
		if err != nil || string(got) != content {
			t.Errorf("%s holds %q (%v), want %q", rel, got, err, content)
		}
		if !slices.ContainsFunc(p.Result.FilesModified, func(f string) bool { return samePath(x.repo, f, rel) }) {
			t.Errorf("FilesModified = %q, want it to name %s", p.Result.FilesModified, rel)
		}
		if len(p.Result.ToolsUsed) == 0 {
			t.Error("ToolsUsed is empty after a file was written")
		}
		if !slices.ContainsFunc(p.Events, func(e backend.Event) bool { return e.Kind == backend.KindToolUse }) {
			t.Errorf("no tool_use event: %+v", p.Events)
		}
		// Call ids pair results with their calls (trace spans rely on it):
		// a result's id, when the CLI gives one, is that of an earlier use.
		used := map[string]bool{}
		for _, e := range p.Events {
			switch {
			case e.Kind == backend.KindToolUse && e.ToolCallID != "":
				used[e.ToolCallID] = true
			case e.Kind == backend.KindToolResult && e.ToolCallID != "" && !used[e.ToolCallID]:
				t.Errorf("tool_result with call id %q comes after no tool_use with it: %+v", e.ToolCallID, p.Events)
			}
		}
	})

	t.Run("Fail", func(t *testing.T) {
		x := setup(t)
		msg := "the scripted failure " + token()
		p := x.run(t, backend.Request{Task: "fail please"}, Fail(msg))
		if !p.Result.IsError {
			t.Fatalf("a failing run is not IsError: %+v", p.Result)
		}
		if !strings.Contains(p.Result.Output, msg) {
			t.Errorf("Output = %q, want it to contain %q", p.Result.Output, msg)
		}
	})

	t.Run("UnknownEventIsIgnored", func(t *testing.T) {
		x := setup(t)
		p := x.run(t, backend.Request{Task: "answer"}, UnknownEvent("still fine "+token()))
		x.wantSuccess(t, p, "still fine")
		for _, e := range p.Events {
			if e.Kind == backend.KindError {
				t.Errorf("an unknown event became an error event: %+v", e)
			}
		}
	})

	t.Run("FinishWithoutOutputIsAnError", func(t *testing.T) {
		t.Parallel()
		repo := t.TempDir()
		res := b.NewParser(backend.Request{Repository: repo, Task: "x"}).Finish(3, "segmentation fault")
		if !res.IsError || res.Output == "" {
			t.Errorf("Finish(3, ...) with no output = %+v, want IsError and a message", res)
		}
	})
}

// bundle is one case's backend, fake and directories.
type bundle struct {
	b    backend.Backend
	cli  Scripted
	home string
	repo string
}

// run runs one request (in the case's repository) with the fake playing s.
func (x *bundle) run(t *testing.T, req backend.Request, s Scenario) Process {
	t.Helper()
	req.Repository = x.repo
	req = backend.ForRun(req)
	argv, err := x.b.Command(req)
	if err != nil {
		t.Fatalf("Command(%+v): %v", req, err)
	}
	if len(argv) == 0 {
		t.Fatalf("Command(%+v) returned an empty argv", req)
	}
	if x.cli.Binary != "" {
		argv = append([]string{x.cli.Binary}, argv[1:]...)
	}
	env := append(BaseEnv(x.home), x.cli.Env(x.cli.Script(t, s))...)
	return Run(t, x.b.NewParser(req), argv, x.repo, env)
}

// wantSuccess checks a run that should have answered with reply in it.
func (x *bundle) wantSuccess(t *testing.T, p Process, reply string) {
	t.Helper()
	if p.Result.IsError {
		t.Fatalf("the run failed: %+v\nargv %q\nstdout %q\nstderr %q", p.Result, p.Argv, p.Stdout, p.Stderr)
	}
	if !strings.Contains(p.Result.Output, reply) {
		t.Errorf("Output = %q, want it to contain %q", p.Result.Output, reply)
	}
	if x.cli.Sessionless {
		return
	}
	initAt := slices.IndexFunc(p.Events, func(e backend.Event) bool { return e.Kind == backend.KindInit })
	resultAt := slices.IndexFunc(p.Events, func(e backend.Event) bool { return e.Kind == backend.KindResult })
	switch {
	case initAt < 0:
		t.Errorf("no init event: %+v", p.Events)
	case resultAt >= 0 && resultAt < initAt:
		t.Errorf("the result event (#%d) came before the init event (#%d): %+v", resultAt, initAt, p.Events)
	}
}

// samePath says whether a path the CLI reported (absolute, or relative to
// the repository) is rel in repo.
func samePath(repo, reported, rel string) bool {
	want := filepath.Join(repo, filepath.FromSlash(rel))
	got := reported
	if !filepath.IsAbs(got) {
		got = filepath.Join(repo, got)
	}
	if filepath.Clean(got) == want {
		return true
	}
	a, errA := filepath.EvalSymlinks(got)
	b, errB := filepath.EvalSymlinks(want)
	return errA == nil && errB == nil && a == b
}

// token makes a scenario's texts unique, so a run cannot pass by repeating
// an earlier one.
func token() string { return rand.Text()[:10] }
