// Package runner runs one agent CLI process for mesh-exec, the same way for
// every backend: in the repository, with stdin from /dev/null, a scrubbed
// environment, its own process group, and a clean end. Cancellation and
// timeouts stop the whole group (SIGTERM, a grace period, SIGKILL) and return
// the partial output as an error result; a finished run's stray children are
// killed too, so no process outlives its run.
package runner

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshwork/meshwork/pkg/procgroup"
	"github.com/meshwork/meshwork/pkg/proctree"
	"github.com/meshwork/meshwork/pkg/tailbuf"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Config configures a Runner.
type Config struct {
	// Env is the environment agents start from. Defaults to mesh-exec's own.
	// CLAUDECODE and CLAUDE_CODE_ENTRYPOINT are always removed: an agent must
	// not think it runs inside another Claude Code.
	Env []string
	// Grace is how long a stopped agent gets between SIGTERM and SIGKILL.
	// Defaults to 5s.
	Grace time.Duration
	// Credential, when set, runs agents as this user (mesh-exec started as root).
	Credential *syscall.Credential
	// MaxLine bounds one line of agent output. Defaults to 16 MiB.
	MaxLine int
	// Sweeper, when set, ends what an agent leaves running (a daemon that
	// left its process group) once no agent runs; see package proctree.
	Sweeper *proctree.Sweeper
}

// Runner runs agent processes.
type Runner struct {
	cfg Config
}

// New returns a Runner.
func New(cfg Config) *Runner {
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 16 << 20
	}
	return &Runner{cfg: cfg}
}

// Outcome is what a run ended with, beside the backend's result.
type Outcome struct {
	ExitCode int
	Duration time.Duration
	// Stopped says why the run was stopped early: "timeout", "canceled", or "".
	Stopped string
	// SkippedLines counts the output lines longer than MaxLine, which the
	// parser never saw.
	SkippedLines int
}

// scrubbed drops the variables an agent must not inherit.
var scrubbed = []string{"CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT"}

// private reports whether a variable is mesh-exec's own and not the
// agent's: its settings, its bearer token (MESH_EXEC_TOKEN) among them,
// and the telemetry exporter's headers, which carry the collector's
// credentials. An agent runs what a task tells it to, and would hand them
// to anyone who asks.
func private(name string) bool {
	return strings.HasPrefix(name, "MESH_EXEC_") ||
		strings.HasPrefix(name, "OTEL_EXPORTER_OTLP_") && strings.HasSuffix(name, "HEADERS")
}

// gitEnv is configuration for every git the agent runs, its CLI's own
// included (Claude Code runs git status as a session starts, before any
// tool call its hooks see), given as git's command-line configuration,
// which no config file overrides: git uses no bare repository it was not
// pointed at (a directory the agent wrote, with a config naming commands,
// is not a repository to it), and runs no fsmonitor and no hooks. The gate
// keeps the agent from writing .git directories (gate.EvaluateToolCall).
var gitEnv = []string{
	"GIT_CONFIG_COUNT=3",
	"GIT_CONFIG_KEY_0=safe.bareRepository", "GIT_CONFIG_VALUE_0=explicit",
	"GIT_CONFIG_KEY_1=core.fsmonitor", "GIT_CONFIG_VALUE_1=false",
	"GIT_CONFIG_KEY_2=core.hooksPath", "GIT_CONFIG_VALUE_2=/dev/null",
}

// scrubEnv is the agent's environment: env without the scrubbed and
// private variables and any git command-line configuration, with gitEnv.
func scrubEnv(env []string) []string {
	out := make([]string, 0, len(env)+len(gitEnv))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		drop := strings.HasPrefix(name, "GIT_CONFIG_") || name == "GIT_CONFIG_PARAMETERS" || private(name)
		for _, s := range scrubbed {
			drop = drop || name == s
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return append(out, gitEnv...)
}

// ErrBinaryNotFound is returned when the backend's CLI is not installed.
var ErrBinaryNotFound = errors.New("agent CLI not found")

// Run runs one request to the end, or until ctx ends (a deadline is reported
// as "timeout", a cancellation as "canceled"). onEvent sees every event as it
// is parsed, from the run's goroutine; it must not block for long.
func (r *Runner) Run(ctx context.Context, b backend.Backend, req backend.Request, onEvent func(backend.Event)) (backend.Result, Outcome, error) {
	req = backend.ForRun(req)
	argv, err := b.Command(req)
	if err != nil {
		return backend.Result{}, Outcome{}, err
	}
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		return backend.Result{}, Outcome{}, fmt.Errorf("%w: %q (backend %s): install it or point mesh-exec at it", ErrBinaryNotFound, argv[0], b.Name())
	}
	// Not CommandContext: its cancellation kills the leader alone; the whole
	// group is stopped below, SIGTERM first, when ctx ends.
	cmd := exec.Command(bin, argv[1:]...) //nolint:noctx // see above
	cmd.Dir = req.Repository
	cmd.Env = scrubEnv(r.cfg.Env)
	cmd.Stdin = nil // /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cfg.Credential}
	procgroup.Lead(cmd)
	// Our own channel rather than StdoutPipe: the run ends when the agent
	// process exits, not when every process holding its stdout has.
	stdout, stdoutW, err := outputChannel()
	if err != nil {
		return backend.Result{}, Outcome{}, err
	}
	defer stdout.Close()
	cmd.Stdout = stdoutW
	stderr := tailbuf.New(64 << 10)
	cmd.Stderr = stderr
	// Wait copies stderr until every holder closes it; a child that escaped
	// the group gets this long once the agent exited.
	cmd.WaitDelay = 2 * time.Second
	swept := r.cfg.Sweeper.Begin() // nil without a sweeper: its methods do nothing
	defer swept.End()
	start := time.Now()
	err = cmd.Start()
	_ = stdoutW.Close() // the child has its copy
	if err != nil {
		return backend.Result{}, Outcome{}, fmt.Errorf("starting %s: %w", b.Name(), err)
	}
	swept.Started(cmd.Process.Pid)
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		// A finished agent's leftover children (a background shell, a hung
		// tool) go with it; whatever left the group has a moment to let go
		// of stdout, then the read ends anyway.
		_ = procgroup.Signal(pgid, syscall.SIGKILL)
		swept.End()
		_ = stdout.SetReadDeadline(time.Now().Add(2 * time.Second))
		waited <- err
	}()

	// Stop the group when ctx ends: SIGTERM, then SIGKILL after the grace.
	var stopped string
	var stopMu sync.Mutex
	exited := make(chan struct{})
	go func() {
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		stopMu.Lock()
		stopped = "canceled"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			stopped = "timeout"
		}
		stopMu.Unlock()
		procgroup.Stop(pgid, r.cfg.Grace, exited)
	}()

	parser := b.NewParser(req)
	var partial strings.Builder
	skipped := eachLine(stdout, r.cfg.MaxLine, func(line []byte) {
		for _, ev := range parser.Line(line) {
			if ev.Kind == backend.KindText && partial.Len() < 1<<20 {
				partial.WriteString(ev.Text)
			}
			if onEvent != nil {
				onEvent(ev)
			}
		}
	})
	waitErr := <-waited
	close(exited)

	out := Outcome{ExitCode: cmd.ProcessState.ExitCode(), Duration: time.Since(start)}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		out.ExitCode = 128 + int(ws.Signal())
	}
	stopMu.Lock()
	out.Stopped = stopped
	stopMu.Unlock()
	out.SkippedLines = skipped
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return backend.Result{}, out, fmt.Errorf("running %s: %w", b.Name(), waitErr)
	}
	res := parser.Finish(out.ExitCode, stderr.String())
	if out.Stopped != "" {
		res.IsError = true
		msg := fmt.Sprintf("the agent was stopped (%s) after %s", out.Stopped, out.Duration.Round(time.Millisecond))
		if p := partial.String(); p != "" {
			msg += "; partial output:\n" + p
		}
		res.Output = msg
	}
	if res.DurationMS == 0 {
		res.DurationMS = out.Duration.Milliseconds()
	}
	return res, out, nil
}

// outputChannel makes the agent's stdout: a socket pair, not a pipe. The
// agent's own commands run as its user, and a pipe can be opened again by
// any process of that user through /proc/<agent>/fd/1, which would let a
// command the agent runs write events of its choosing (a result with its
// own cost, a hook's answer) into the stream; a socket cannot be opened
// that way. The reading end is non-blocking, so that its read can be given
// a deadline.
func outputChannel() (r, w *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("making the agent's output channel: %w", err)
	}
	// Nothing flows back to the agent: its end only writes.
	_ = syscall.Shutdown(fds[0], syscall.SHUT_WR)
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		_ = syscall.Close(fds[0])
		_ = syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("making the agent's output channel: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "agent stdout"), os.NewFile(uintptr(fds[1]), "agent stdout (agent's end)"), nil
}

// eachLine calls each with every line r holds (without its end of line),
// until r ends or fails. A line longer than max is skipped, not the end of
// the reading: the lines after it (the run's result among them) are still
// read. It returns how many lines it skipped.
func eachLine(r io.Reader, max int, each func([]byte)) (skipped int) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			// The line's end (\n or \r\n) is not counted.
			content := len(bytes.TrimSuffix(bytes.TrimSuffix(chunk, []byte("\n")), []byte("\r")))
			if err != nil {
				content = len(chunk) // the line goes on, or ends without its end
			}
			if len(line)+content > max {
				tooLong, line = true, line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // the same line goes on
		}
		ended := err == nil // by its newline
		switch {
		case tooLong:
			skipped++
		case ended || len(line) > 0:
			line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
			each(line)
		}
		line, tooLong = line[:0], false
		if !ended {
			return skipped
		}
	}
}
