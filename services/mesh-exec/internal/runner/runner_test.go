package runner_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/command"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/runner"
)

// shellAgent is a stand-in backend whose "agent" is a shell script: the
// narrow seam this test needs to make an agent that leaves children behind.
type shellAgent struct{ script string }

func (s shellAgent) Name() string { return "shell" }
func (s shellAgent) Command(backend.Request) ([]string, error) {
	return []string{"sh", "-c", s.script}, nil
}
func (s shellAgent) NewParser(backend.Request) backend.Parser { return &lines{} }

type lines struct{ out []string }

func (l *lines) Line(b []byte) []backend.Event {
	l.out = append(l.out, string(b))
	return []backend.Event{{Kind: backend.KindText, Text: string(b)}}
}

func (l *lines) Finish(code int, _ string) backend.Result {
	return backend.Result{Output: strings.Join(l.out, "\n"), IsError: code != 0}
}

// A finished agent's run ends even when a child it left behind still holds
// its stdout: in its process group (killed), or escaped with setsid (the
// read gives up after a moment).
func TestRunEndsWhenTheAgentExits(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	// The escaped child outlives the test by design, so it sleeps briefly.
	for name, tc := range map[string]struct {
		script string
		within time.Duration
	}{
		"child in the group": {"sleep 60 & echo done", 10 * time.Second},
		"child that escaped": {"setsid sleep 6 & echo done", 5 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := runner.New(runner.Config{Grace: 500 * time.Millisecond})
			start := time.Now()
			res, out, err := r.Run(context.Background(), shellAgent{tc.script}, backend.Request{Repository: os.TempDir()}, nil)
			if err != nil || res.Output != "done" || out.ExitCode != 0 || out.Stopped != "" {
				t.Fatalf("run: %+v %+v %v", res, out, err)
			}
			if d := time.Since(start); d > tc.within {
				t.Errorf("the run took %s: it waited for the child", d)
			}
		})
	}
}

// recordingAgent is shellAgent that records the new session id its
// command line and its parser were made with.
type recordingAgent struct {
	shellAgent
	mu              sync.Mutex
	command, parser []string
}

func (a *recordingAgent) Command(req backend.Request) ([]string, error) {
	a.mu.Lock()
	a.command = append(a.command, req.NewSessionID)
	a.mu.Unlock()
	return a.shellAgent.Command(req)
}

func (a *recordingAgent) NewParser(req backend.Request) backend.Parser {
	a.mu.Lock()
	a.parser = append(a.parser, req.NewSessionID)
	a.mu.Unlock()
	return a.shellAgent.NewParser(req)
}

// Each new run gets a session id of its own, given once: its command line
// and its parser are made with the same one, and two runs of one request
// have two. Through a CLI that takes its id from the caller (the command
// backend), the run reports the id it ran with.
func TestEachRunHasItsOwnSessionID(t *testing.T) {
	t.Parallel()
	r := runner.New(runner.Config{})
	req := backend.Request{Repository: os.TempDir(), Task: "same"}
	a := &recordingAgent{shellAgent: shellAgent{"true"}}
	for range 2 {
		if _, _, err := r.Run(context.Background(), a, req, nil); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.command) != 2 || a.command[0] == "" || a.command[0] == a.command[1] || !slices.Equal(a.command, a.parser) {
		t.Errorf("command lines made with %q, parsers with %q: want two ids, the same for each run", a.command, a.parser)
	}
	b := command.New(command.Config{Argv: []string{"sh", "-c", "echo {session_id}"}})
	res, _, err := r.Run(context.Background(), b, req, nil)
	if err != nil || res.SessionID == "" || res.SessionID != strings.TrimSpace(res.Output) {
		t.Errorf("a run reports session %q but ran with %q (%v)", res.SessionID, res.Output, err)
	}
}

// CLAUDECODE and CLAUDE_CODE_ENTRYPOINT never reach an agent, nor does
// mesh-exec's own configuration (its bearer token among it) or the
// telemetry exporter's headers (credentials of the collector).
func TestEnvironmentIsScrubbed(t *testing.T) {
	t.Parallel()
	r := runner.New(runner.Config{Env: []string{
		"PATH=" + os.Getenv("PATH"), "CLAUDECODE=1", "CLAUDE_CODE_ENTRYPOINT=cli", "KEEP=yes",
		"MESH_EXEC_TOKEN=server-secret-token-0123456789", "MESH_EXEC_WORKSPACE_ROOT=/w",
		"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer x", "OTEL_EXPORTER_OTLP_TRACES_HEADERS=k=v", "OTEL_SERVICE_NAME=kept",
	}})
	res, _, err := r.Run(context.Background(), shellAgent{`echo "[$CLAUDECODE][$CLAUDE_CODE_ENTRYPOINT][$KEEP][$MESH_EXEC_TOKEN][$MESH_EXEC_WORKSPACE_ROOT][$OTEL_EXPORTER_OTLP_HEADERS][$OTEL_EXPORTER_OTLP_TRACES_HEADERS][$OTEL_SERVICE_NAME]"`}, backend.Request{Repository: os.TempDir()}, nil)
	if err != nil || res.Output != "[][][yes][][][][][kept]" {
		t.Errorf("environment: %q %v", res.Output, err)
	}
}

// Every git the agent runs takes the runner's git configuration over any
// it inherits: a bare repository the agent wrote (its config naming a
// command as fsmonitor) is not a repository to it.
func TestAgentGitUsesNoImplicitBareRepository(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", "--bare", filepath.Join(dir, "b")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	r := runner.New(runner.Config{Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.bareRepository", "GIT_CONFIG_VALUE_0=all"}})
	res, _, err := r.Run(context.Background(), shellAgent{`cd b && git rev-parse --git-dir 2>&1; echo "[$GIT_CONFIG_VALUE_1]"`}, backend.Request{Repository: dir}, nil)
	if err != nil || !strings.Contains(res.Output, "cannot use bare repository") || !strings.Contains(res.Output, "[false]") {
		t.Errorf("git in a bare repository the agent did not name: %q %v", res.Output, err)
	}
}

// The agent's commands run as its user: one that opens the agent's stdout
// again through /proc, to write events of its own into the stream, cannot.
func TestAgentOutputCannotBeOpenedAgain(t *testing.T) {
	t.Parallel()
	r := runner.New(runner.Config{})
	// The command's own output goes nowhere; it writes to the agent's
	// stdout by name.
	script := `agent=$$; sh -c "echo forged > /proc/$agent/fd/1" >/dev/null 2>&1 & wait; echo real`
	res, out, err := r.Run(context.Background(), shellAgent{script}, backend.Request{Repository: os.TempDir()}, nil)
	if err != nil || res.Output != "real" || out.ExitCode != 0 {
		t.Errorf("run: output %q, %+v, %v; want only the agent's own line", res.Output, out, err)
	}
}

// A line past MaxLine is skipped, and the lines after it (where the run's
// result comes) are still read.
func TestAnOverLongLineIsSkipped(t *testing.T) {
	t.Parallel()
	r := runner.New(runner.Config{MaxLine: 1024})
	script := `echo before; head -c 200000 /dev/zero | tr '\0' a; echo; printf 'after\r\nlast'`
	res, out, err := r.Run(context.Background(), shellAgent{script}, backend.Request{Repository: os.TempDir()}, nil)
	if err != nil || res.Output != "before\nafter\nlast" || out.SkippedLines != 1 {
		t.Errorf("run: output %q, %d lines skipped, %v; want the lines around the long one, and one skipped", res.Output, out.SkippedLines, err)
	}
}
