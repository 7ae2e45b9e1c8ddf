// Package fakeagenttest builds the fakeagents program for backend tests and
// turns the conformance suite's scenarios (package backendtest) into its
// scripts.
//
// A test package builds the fake at most once, into a temporary directory
// that its TestMain removes:
//
//	func TestMain(m *testing.M) { fakeagenttest.Main(m) }
//
//	bin := fakeagenttest.Binary(t, "codex") // .../codex, playing Codex
package fakeagenttest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/script"
)

// Package is the import path of the fakeagents program.
const Package = "github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents"

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
	linkMu    sync.Mutex
)

// Main runs a package's tests and removes the fake built for them.
func Main(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// Binary returns the path of the fake playing name ("codex", "opencode",
// "gemini", or any other name for the plain agent of the command backend),
// building it on first use. The fake picks its part from the base name of
// the path, a link to the one build.
func Binary(t testing.TB, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "fakeagents-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "fakeagents")
		buildErr = build(buildBin)
	})
	if buildErr != nil {
		t.Fatalf("building the fake agents: %v", buildErr)
	}
	linkMu.Lock()
	defer linkMu.Unlock()
	link := filepath.Join(buildDir, name)
	if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
		if err := os.Symlink(buildBin, link); err != nil {
			t.Fatalf("linking the fake as %s: %v", name, err)
		}
	}
	return link
}

func build(out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command, needed to build the fake: %w", err)
	}
	cmd := exec.Command(gobin, "build", "-o", out, Package)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", Package, err, msg)
	}
	return nil
}

// FromScenario is the script of one suite scenario: the unknown event first,
// then the edit, then the failure or the reply, for any prompt.
func FromScenario(s backendtest.Scenario) *script.Script {
	var steps []script.Step
	if s.UnknownEvent {
		steps = append(steps, script.Step{Unknown: true})
	}
	if s.Edit != nil {
		steps = append(steps, script.Step{Edit: &script.Edit{Path: filepath.FromSlash(s.Edit.Path), Content: s.Edit.Content}})
	}
	if s.Fail != "" {
		steps = append(steps, script.Step{Fail: s.Fail})
	} else if s.Reply != "" {
		steps = append(steps, script.Step{Reply: s.Reply})
	}
	return &script.Script{Runs: []script.Run{{Steps: steps}}}
}

// WriteScript writes sc into a new file under t.TempDir and returns its path.
func WriteScript(t testing.TB, sc *script.Script) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script.json")
	if err := sc.Write(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Env is the environment that makes the fake follow the script at path.
func Env(path string) []string {
	return []string{"FAKEAGENT_SCRIPT=" + path}
}

// Scripted is the suite's view of the fake: bin (from [Binary]) replaces the
// backend's executable, and each scenario becomes a script. The caller sets
// UnknownSession (and Sessionless) for its CLI.
func Scripted(bin string) backendtest.Scripted {
	return backendtest.Scripted{
		Binary: bin,
		Script: func(t *testing.T, s backendtest.Scenario) string {
			return WriteScript(t, FromScenario(s))
		},
		Env: Env,
	}
}

// Run runs one request of b against the fake with script sc, the way the
// suite does (backendtest.Run), HOME being home so sessions persist between
// runs that share it. The request's Repository is the working directory.
func Run(t *testing.T, b backend.Backend, home string, req backend.Request, sc *script.Script) backendtest.Process {
	t.Helper()
	req = backend.ForRun(req)
	argv, err := b.Command(req)
	if err != nil {
		t.Fatalf("Command(%+v): %v", req, err)
	}
	env := append(backendtest.BaseEnv(home), Env(WriteScript(t, sc))...)
	return backendtest.Run(t, b.NewParser(req), argv, req.Repository, env)
}
