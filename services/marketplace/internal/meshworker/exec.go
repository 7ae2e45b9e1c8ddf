package meshworker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshwork/meshwork/pkg/procgroup"
)

const (
	// execPath is the only PATH a command sees, and where a bare program
	// name is looked up: the worker's own PATH is not passed on.
	execPath = "/usr/local/bin:/usr/bin:/bin"
	// killGrace is how long a command's process group has between SIGTERM
	// and SIGKILL, and how long its output may stay open once it is killed.
	killGrace = 2 * time.Second
)

type execIn struct {
	Command   []string `json:"command" jsonschema:"the program and its arguments (argv); no shell is involved"`
	TimeoutMS int64    `json:"timeout_ms,omitempty" jsonschema:"timeout in milliseconds (default, and cap: the server's exec timeout)"`
}

type execOut struct {
	ExitCode  int    `json:"exit_code" jsonschema:"exit status; 128+N when killed by signal N, as shells report it"`
	Stdout    string `json:"stdout" jsonschema:"standard output, cut at the server's output limit"`
	Stderr    string `json:"stderr" jsonschema:"standard error, cut at the server's output limit"`
	TimedOut  bool   `json:"timed_out" jsonschema:"true when the command was killed for running past its timeout"`
	Truncated bool   `json:"truncated" jsonschema:"true when stdout or stderr was cut"`
	// QuotaExceeded: the workspace passed its quota while the command ran
	// (it was killed) or by the time it ended.
	QuotaExceeded string `json:"quota_exceeded,omitempty" jsonschema:"why the workspace is over its quota after this command (it was killed if it was still running); later writes and commands are refused until files are deleted"`
}

// quotaInterval is how often the workspace is measured while a command runs.
const quotaInterval = 500 * time.Millisecond

func (w *worker) exec(ctx context.Context, in execIn) (execOut, error) {
	if !w.cfg.AllowExec {
		return execOut{}, errors.New("exec is not allowed for this worker")
	}
	if len(in.Command) == 0 || in.Command[0] == "" {
		return execOut{}, errors.New("command is required")
	}
	timeout := w.cfg.ExecTimeout
	switch ms := in.TimeoutMS; {
	case ms < 0:
		return execOut{}, errors.New("timeout_ms must not be negative")
	case ms > 0 && ms < timeout.Milliseconds():
		timeout = time.Duration(ms) * time.Millisecond
	}
	prog, err := lookPath(in.Command[0])
	if err != nil {
		return execOut{}, err
	}

	if err := w.quota.Check("exec"); err != nil {
		return execOut{}, err
	}
	if err := makeGoTmpDir(w.cfg.ExecEnv); err != nil {
		return execOut{}, err
	}
	// The command may change anything: the usage is measured again when it
	// ends, or forgotten if it ends some other way.
	measured := false
	defer func() {
		if !measured {
			w.quota.Invalidate()
		}
	}()

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, prog, in.Command[1:]...)
	cmd.Args[0] = in.Command[0]
	cmd.Dir = w.absRoot
	cmd.Env = append([]string{"PATH=" + execPath, "HOME=/tmp"}, w.cfg.ExecEnv...)
	// Its own process group, so that what the command starts is killed
	// with it.
	procgroup.Lead(cmd)
	procgroup.CancelWith(cmd, syscall.SIGTERM)
	cmd.WaitDelay = killGrace // then Wait kills the leader; the group is killed below

	out := &capture{max: w.cfg.MaxOutput}
	errOut := &capture{max: w.cfg.MaxOutput}
	swept := w.cfg.Sweeper.Begin() // nil without a sweeper: its methods do nothing
	defer swept.End()
	if err := startWithPipes(cmd, out, errOut); err != nil {
		return execOut{}, fmt.Errorf("starting %s: %w", in.Command[0], err)
	}
	swept.Started(cmd.Process.Pid)
	var quotaMsg atomic.Pointer[string]
	stopWatch, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		w.quota.Watch(quotaInterval, stopWatch, func(reason string) {
			quotaMsg.Store(&reason)
			procgroup.Kill(cmd)
		})
	}()
	waitErr := cmd.Wait()
	close(stopWatch)
	// A measure under way ends before the group is reaped below, so its
	// kill never reaches a recycled process group.
	<-watched
	// Whatever is left of the group (background children, or members that
	// ignored SIGTERM) is killed now, and with the sweeper whatever left
	// the group too (setsid): nothing outlives the call.
	procgroup.Kill(cmd)
	swept.End()
	out.finish()
	errOut.finish()

	if ctx.Err() != nil {
		return execOut{}, fmt.Errorf("exec %s: %w", in.Command[0], ctx.Err())
	}
	res := execOut{
		Stdout:    out.buf.String(),
		Stderr:    errOut.buf.String(),
		TimedOut:  errors.Is(runCtx.Err(), context.DeadlineExceeded),
		Truncated: out.truncated || errOut.truncated,
	}
	if cmd.ProcessState == nil {
		return execOut{}, fmt.Errorf("exec %s: %w", in.Command[0], waitErr)
	}
	res.ExitCode = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = 128 + int(ws.Signal())
	}
	if msg, err := w.quota.Remeasure(); err == nil {
		res.QuotaExceeded, measured = msg, true
	}
	if msg := quotaMsg.Load(); msg != nil {
		res.QuotaExceeded = *msg // why it was killed
	}
	return res, nil
}

// toolchainVars are the variables ToolchainEnv passes on. The proxy
// variables are set by the marketplace on egress workers: their
// only way out is the egress proxy they name.
var toolchainVars = []string{
	"GOCACHE", "GOFLAGS", "GOMODCACHE", "GOPATH", "GOPROXY", "GOTMPDIR", "GOTOOLCHAIN",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
}

// ToolchainEnv returns the entries of environ ("NAME=value", as from
// os.Environ) that say where the Go toolchain keeps its caches and temporary
// files and whether it may download: GOCACHE, GOFLAGS, GOMODCACHE, GOPATH,
// GOPROXY, GOTMPDIR and GOTOOLCHAIN, and the HTTP proxy an egress worker
// must use (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, in both cases). meshworker serve gives them to the
// commands it runs (Config.ExecEnv): a worker's root filesystem is read-only
// and its /tmp noexec, so the image points them into the workspace. Nothing
// else of the worker's environment reaches a command.
func ToolchainEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(toolchainVars, name) {
			out = append(out, kv)
		}
	}
	return out
}

// makeGoTmpDir creates the GOTMPDIR of env, if it sets one: go build and go
// test put their work directory there and fail when it is missing.
func makeGoTmpDir(env []string) error {
	for _, kv := range env {
		if dir, ok := strings.CutPrefix(kv, "GOTMPDIR="); ok && dir != "" {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("creating GOTMPDIR: %w", err)
			}
		}
	}
	return nil
}

// lookPath resolves a bare program name on execPath rather than on the
// worker's own PATH. A name with a slash is used as it is: relative to the
// workspace (the working directory) or absolute.
func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(execPath) {
		if p, err := exec.LookPath(filepath.Join(dir, name)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in %s", name, execPath)
}

// startWithPipes starts cmd with its stdout and stderr on pipes read into
// the captures. The pipes are ours, not exec's, so Wait returns when the
// command exits, not when the last process holding them does: the rest of
// the group is killed first, then the output drained.
func startWithPipes(cmd *exec.Cmd, out, errOut *capture) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close() // the child has its copies
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	out.start(outR)
	errOut.start(errR)
	return nil
}

// capture reads a pipe, keeping the first max bytes. It keeps reading past
// the limit so that the command never blocks on a full pipe.
type capture struct {
	max       int64
	buf       bytes.Buffer
	truncated bool
	r         *os.File
	done      chan struct{}
}

func (c *capture) start(r *os.File) {
	c.r, c.done = r, make(chan struct{})
	go func() {
		defer close(c.done)
		_, _ = io.Copy(c, r)
	}()
}

// finish waits for the output to end; a process that escaped the group
// and holds the pipe open gets killGrace before it is cut off.
func (c *capture) finish() {
	_ = c.r.SetReadDeadline(time.Now().Add(killGrace))
	<-c.done
	c.r.Close()
}

func (c *capture) Write(p []byte) (int, error) {
	room := c.max - int64(c.buf.Len())
	if int64(len(p)) > room {
		c.truncated = true
		c.buf.Write(p[:max(room, 0)])
	} else {
		c.buf.Write(p)
	}
	return len(p), nil
}
