package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshwork/meshwork/pkg/procgroup"
	"github.com/meshwork/meshwork/pkg/tailbuf"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// closeGrace is how long a closed session's process gets to exit on end of
// input, and then on SIGTERM, before the next step.
const closeGrace = time.Second

// Exec implements workerruntime.Runtime. argv[0] is mapped through
// Config.Binaries; every argument that is /workspace or below it is
// rewritten to the journey's directory, which is also the working
// directory. The process gets a minimal environment (plus the spec's Env)
// and its own process group, which is killed when the session is closed,
// the worker stopped or removed, or ctx done.
func (r *Runtime) Exec(ctx context.Context, h workerruntime.Handle, argv []string) (workerruntime.Session, error) {
	if len(argv) == 0 {
		return nil, errors.New("exec: empty argv")
	}
	host, ok := r.cfg.Binaries[argv[0]]
	if !ok {
		return nil, fmt.Errorf("exec %s: not a known binary of the process runtime (Config.Binaries)", argv[0])
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.workers[h.ID]
	if rec == nil {
		return nil, fmt.Errorf("exec %s in %q: %w", argv[0], h.ID, workerruntime.ErrNotFound)
	}
	if rec.State != workerruntime.StateRunning {
		return nil, fmt.Errorf("exec %s in %q: worker is not running", argv[0], h.ID)
	}
	dir := r.workspace(rec.Journey)

	args := make([]string, 0, len(argv)-1)
	for _, a := range argv[1:] {
		args = append(args, rewritePath(a, dir))
	}
	// ctx done kills the whole group, not just the process os/exec knows.
	cmd := exec.CommandContext(ctx, host, args...)
	procgroup.CancelWith(cmd, syscall.SIGKILL)
	cmd.Dir = dir
	cmd.Env = append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + dir,
		"TMPDIR=" + os.TempDir(),
		"LANG=C.UTF-8",
	}, rec.Env...)
	procgroup.Lead(cmd)

	// Our own pipes rather than cmd.StdoutPipe: os/exec closes those in Wait,
	// which would lose output not yet read when the process exits.
	p, err := newPipes()
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdinR, p.stdoutW, p.stderrW
	if err := cmd.Start(); err != nil {
		p.closeAll()
		return nil, fmt.Errorf("exec %s: %w", argv[0], err)
	}
	p.closeChildEnds()

	s := &session{
		r: r, journey: rec.Journey, cmd: cmd, pid: cmd.Process.Pid,
		stdin: p.stdinW, stdout: p.stdoutR, done: make(chan struct{}),
	}
	if r.sessions[rec.Journey] == nil {
		r.sessions[rec.Journey] = map[*session]struct{}{}
	}
	r.sessions[rec.Journey][s] = struct{}{}
	logs := r.logs[rec.Journey]
	if logs == nil {
		logs = tailbuf.New(workerruntime.MaxLogBytes) // per journey: what Logs returns at the most
		r.logs[rec.Journey] = logs
	}

	log := r.logger.With(slog.String("journey", rec.Journey), slog.Int("pid", s.pid), slog.String("argv0", argv[0]))
	log.DebugContext(ctx, "exec started", slog.String("host_binary", host))
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		// Read until every holder of the write end (children too) is gone.
		_, _ = io.Copy(logs, p.stderrR)
		_ = p.stderrR.Close()
	}()
	go s.reap(log, stderrDone)
	return s, nil
}

// rewritePath maps /workspace and paths below it into dir.
func rewritePath(arg, dir string) string {
	if arg == workerruntime.WorkspacePath {
		return dir
	}
	if rest, ok := strings.CutPrefix(arg, workerruntime.WorkspacePath+"/"); ok {
		return dir + "/" + rest
	}
	return arg
}

type pipes struct {
	stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW *os.File
}

func newPipes() (*pipes, error) {
	var p pipes
	var err error
	if p.stdinR, p.stdinW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("creating stdin: %w", err)
	}
	if p.stdoutR, p.stdoutW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, fmt.Errorf("creating stdout: %w", err)
	}
	if p.stderrR, p.stderrW, err = os.Pipe(); err != nil {
		p.closeAll()
		return nil, fmt.Errorf("creating stderr: %w", err)
	}
	return &p, nil
}

// closeChildEnds closes our copies of the ends the child inherited, so that
// end of file is seen when the child (and its children) close theirs.
func (p *pipes) closeChildEnds() {
	for _, f := range []*os.File{p.stdinR, p.stdoutW, p.stderrW} {
		_ = f.Close()
	}
}

func (p *pipes) closeAll() {
	for _, f := range []*os.File{p.stdinR, p.stdinW, p.stdoutR, p.stdoutW, p.stderrR, p.stderrW} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// session is one exec'd process.
type session struct {
	r       *Runtime
	journey string
	cmd     *exec.Cmd
	pid     int // also the process group id
	stdin   *os.File
	stdout  *os.File

	done    chan struct{} // closed when the process has been reaped
	code    int
	waitErr error

	closeOnce sync.Once
}

var _ workerruntime.Session = (*session)(nil)

func (s *session) Read(p []byte) (int, error)  { return s.stdout.Read(p) }
func (s *session) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// CloseWrite closes the process's stdin.
func (s *session) CloseWrite() error {
	if err := s.stdin.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("closing stdin: %w", err)
	}
	return nil
}

// stderrGrace bounds how long an exited process's stderr is waited for.
const stderrGrace = time.Second

// Wait returns the exit code; a process killed by a signal reports 128 plus
// the signal number, as a shell would.
func (s *session) Wait() (int, error) {
	<-s.done
	return s.code, s.waitErr
}

// Close closes stdin and stdout, gives the process a moment to exit on end
// of input, then SIGTERM, then SIGKILL, and kills what is left of its group.
func (s *session) Close() error {
	s.closeOnce.Do(func() {
		_ = s.stdin.Close()
		_ = s.stdout.Close()
		select {
		case <-s.done:
		case <-time.After(closeGrace):
			s.terminate(closeGrace)
		}
		s.signal(syscall.SIGKILL)
	})
	return nil
}

// terminate sends SIGTERM to the group, waits up to grace for the process to
// exit, then sends SIGKILL and waits for it to be reaped.
func (s *session) terminate(grace time.Duration) {
	s.signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(grace):
	}
	s.signal(syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		// Uninterruptible sleep: nothing more can be done from here.
	}
}

func (s *session) signal(sig syscall.Signal) {
	// The whole process group, children included.
	if err := procgroup.Signal(s.pid, sig); err != nil {
		s.r.logger.Warn("signalling an exec'd process group failed", slog.String("journey", s.journey), slog.Int("pgid", s.pid), slog.Any("error", err))
	}
}

// reap waits for the process and unregisters the session. Wait returns
// once the process's stderr is in the journey's logs too (so that the logs
// keep the order of the execs), unless a child it left keeps stderr open
// longer than stderrGrace.
func (s *session) reap(log *slog.Logger, stderrDone <-chan struct{}) {
	err := s.cmd.Wait()
	select {
	case <-stderrDone:
	case <-time.After(stderrGrace):
	}
	// The process state is the truth; Wait's error may only say that ctx
	// was done, even for a process that then exited 0.
	if ps := s.cmd.ProcessState; ps != nil {
		s.code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.code = 128 + int(ws.Signal())
		}
	} else {
		s.code = -1
		s.waitErr = fmt.Errorf("waiting for process %d: %w", s.pid, err)
	}
	log.Debug("exec exited", slog.Int("code", s.code))
	s.r.mu.Lock()
	delete(s.r.sessions[s.journey], s)
	if len(s.r.sessions[s.journey]) == 0 {
		delete(s.r.sessions, s.journey)
	}
	s.r.mu.Unlock()
	close(s.done)
}

// killSessions terminates every live session of a journey, concurrently,
// each with grace between SIGTERM and SIGKILL.
func (r *Runtime) killSessions(journey string, grace time.Duration) {
	r.mu.Lock()
	live := make([]*session, 0, len(r.sessions[journey]))
	for s := range r.sessions[journey] {
		live = append(live, s)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range live {
		wg.Go(func() { s.terminate(grace) })
	}
	wg.Wait()
}
