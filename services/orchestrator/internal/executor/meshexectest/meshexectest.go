// Package meshexectest runs real mesh-exec processes for the orchestrator's
// tests, with mesh-exec's fake claude CLI (a test double under its testdata)
// as their agent. It builds both binaries once per test binary, starts
// `mesh-exec serve --transport http` on a free port (or gives the argv and
// environment of a stdio one), and kills every process it started, agents
// included, when the test ends. Only tests import it.
//
// The fake replies "ok: <task>" unless Options.Script says otherwise; the
// script format is in the package doc of
// services/mesh-exec/testdata/fakeclaude.
package meshexectest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/fakeclaudelog"
	"github.com/meshwork/meshwork/pkg/procgroup"
	"github.com/meshwork/meshwork/pkg/servicetest"
)

// Token is the bearer token of every mesh-exec Start runs.
const Token = "meshexectest-token-0123456789abcdef"

// Binaries are mesh-exec and the fake claude, built into Dir.
type Binaries struct {
	Dir      string
	MeshExec string
	Claude   string // named claude, so that Dir first on PATH makes it the agent
}

var built struct {
	once sync.Once
	bins Binaries
	err  error
}

// BuildBinaries builds mesh-exec and the fake claude, once per test binary,
// from mesh-exec's module in this repository (so it works with or without
// the workspace). Call RemoveBinaries at the end of TestMain to delete them.
func BuildBinaries(t testing.TB) Binaries {
	t.Helper()
	built.once.Do(func() { built.bins, built.err = build() })
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bins
}

// RemoveBinaries deletes what BuildBinaries built; for TestMain, after the
// tests ran.
func RemoveBinaries() {
	if built.bins.Dir != "" {
		_ = os.RemoveAll(built.bins.Dir)
	}
}

func build() (Binaries, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return Binaries{}, errors.New("meshexectest: cannot locate its source file")
	}
	module := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "mesh-exec")
	dir, err := os.MkdirTemp("", "meshexectest-")
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{Dir: dir, MeshExec: filepath.Join(dir, "mesh-exec"), Claude: filepath.Join(dir, "claude")}
	for _, p := range []struct{ out, pkg string }{
		{b.MeshExec, "./cmd/mesh-exec"},
		{b.Claude, "./testdata/fakeclaude"},
	} {
		cmd := exec.CommandContext(context.Background(), "go", "build", "-o", p.out, p.pkg)
		cmd.Dir = module
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.RemoveAll(dir)
			return Binaries{}, fmt.Errorf("building %s in %s: %w\n%s", p.pkg, module, err, out)
		}
	}
	return b, nil
}

// Options configure a mesh-exec under test.
type Options struct {
	// Script is the fake claude's script, in the FAKE_CLAUDE_SCRIPT format,
	// marshalled to JSON. Defaults to none: the fake replies "ok: <task>".
	Script any
	// LoggedOut starts the agent without credentials, so the fake answers
	// as the real CLI does when not logged in.
	LoggedOut bool
	// Args are more flags for `mesh-exec serve`. Defaults to none.
	Args []string
	// Env are more environment entries, such as MESH_EXEC_BUSY=refuse.
	// Defaults to none.
	Env []string
}

// Server is one mesh-exec serving streamable HTTP.
type Server struct {
	// Endpoint is its MCP URL, http://127.0.0.1:<port>/mcp.
	Endpoint string
	// Token is its bearer token.
	Token string
	// Addr is its listen address, kept across Restart.
	Addr string
	// WorkspaceRoot holds the repositories and mesh-exec's sessions; Home
	// the fake's sessions; Log the fake's invocation log (one JSON line per
	// agent run, see Invocations).
	WorkspaceRoot, Home, Log string

	bins Binaries
	args []string
	env  []string

	mu   sync.Mutex
	proc *servicetest.Process // nil when mesh-exec is not running
	last *servicetest.Process // the latest, for its log
}

// Start starts `mesh-exec serve --transport http` on a free port of
// 127.0.0.1 and waits until it serves. The test's cleanup stops it.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bins := BuildBinaries(t)
	s := &Server{Token: Token, Addr: "127.0.0.1:0", bins: bins, args: opts.Args}
	s.WorkspaceRoot, s.Home, s.Log, s.env = prepare(t, bins, opts)
	s.env = append(s.env, "MESH_EXEC_TOKEN="+Token)
	t.Cleanup(func() {
		s.Stop()
		s.mu.Lock()
		last := s.last
		s.mu.Unlock()
		if t.Failed() && last != nil {
			t.Logf("mesh-exec's stderr:\n%s", last.Log())
		}
	})
	s.start(t)
	return s
}

// StdioCommand returns the argv and environment of `mesh-exec serve
// --transport stdio` for opts, for a client that starts mesh-exec itself.
// The test's cleanup kills the agents the child left behind.
func StdioCommand(t testing.TB, opts Options) (argv, env []string) {
	t.Helper()
	bins := BuildBinaries(t)
	_, _, log, env := prepare(t, bins, opts)
	t.Cleanup(func() { killAgents(log, bins.Claude) })
	return append([]string{bins.MeshExec, "serve", "--transport", "stdio"}, opts.Args...), env
}

// prepare makes a mesh-exec's directories and environment: the fake first
// on PATH, a home for its sessions, its log, a test key unless logged out.
func prepare(t testing.TB, bins Binaries, opts Options) (root, home, log string, env []string) {
	t.Helper()
	dir := t.TempDir()
	root, home, log = filepath.Join(dir, "workspace"), filepath.Join(dir, "home"), filepath.Join(dir, "fakeclaude.log")
	for _, d := range []string{root, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	env = []string{
		"PATH=" + bins.Dir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		fakeclaudelog.Env + "=" + log,
		"MESH_EXEC_WORKSPACE_ROOT=" + root,
		"MESH_EXEC_GRACE=500ms",
	}
	if !opts.LoggedOut {
		env = append(env, "ANTHROPIC_API_KEY=meshexectest-not-a-real-key")
	}
	if opts.Script != nil {
		b, err := json.Marshal(opts.Script)
		if err != nil {
			t.Fatalf("meshexectest: the script: %v", err)
		}
		p := filepath.Join(dir, "script.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		env = append(env, "FAKE_CLAUDE_SCRIPT="+p)
	}
	return root, home, log, append(env, opts.Env...)
}

// start runs mesh-exec on s.Addr and waits until it logs that it serves,
// with the address it listens on.
func (s *Server) start(t testing.TB) {
	t.Helper()
	cmd := exec.CommandContext(context.Background(), s.bins.MeshExec, append([]string{"serve", "--transport", "http", "--addr", s.Addr}, s.args...)...)
	cmd.Env = s.env
	p := servicetest.Start(t, cmd, "serving mesh_execute over HTTP")
	s.mu.Lock()
	s.proc, s.last = p, p
	s.mu.Unlock()
	s.Addr = p.Addr
	s.Endpoint = "http://" + p.Addr + "/mcp"
}

// Stop ends mesh-exec as an orchestrator's deployment would (SIGTERM: it
// stops its agents first) and waits for it; after 20s it kills it. It does
// nothing when mesh-exec is not running.
func (s *Server) Stop() { s.end(func(p *servicetest.Process) { p.Stop(20 * time.Second) }) }

// Kill crashes mesh-exec (SIGKILL) and then kills the agents it left
// running, as a crashed container would lose them.
func (s *Server) Kill() { s.end((*servicetest.Process).Kill) }

// end ends the running mesh-exec, if any, with stop, then kills whatever
// agents are left.
func (s *Server) end(stop func(*servicetest.Process)) {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	stop(p)
	killAgents(s.Log, s.bins.Claude)
}

// Restart stops mesh-exec if it runs and starts it again on the same
// address, with the same workspace, sessions and environment: the agent
// sessions it had can be resumed.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
}

// Invocations reads the fake claude's log: one entry per agent run.
func (s *Server) Invocations(t testing.TB) []fakeclaudelog.Invocation {
	t.Helper()
	calls, err := fakeclaudelog.Read(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// killAgents kills the process groups of the fake agents in log that still
// run (mesh-exec starts each in its own group). A group is killed only if
// its leader is still the fake, so a reused pid is left alone.
func killAgents(log, claude string) {
	calls, _ := fakeclaudelog.Read(log)
	for _, c := range calls {
		if c.PID <= 0 {
			continue
		}
		exe, err := os.Readlink("/proc/" + strconv.Itoa(c.PID) + "/exe")
		if err != nil || exe != claude {
			continue
		}
		_ = procgroup.Signal(c.PID, syscall.SIGKILL)
	}
}
