package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// Exec implements workerruntime.Runtime. The process runs without a TTY so its
// stdout and stderr arrive multiplexed on one connection; the session
// separates them, because stdout carries a protocol and must never see a
// byte of stderr (which is logged at debug level instead).
//
// If the engine cannot start the process (a missing binary), it writes its
// error as text on stdout, ends the stream, and Wait returns 126 or 127.
//
// ctx bounds the session: when it is done the session is closed. Closing a
// session closes the process's stdin and the connection; the engine has no
// way to kill an exec'd process, so one that ignores end of input runs on
// until it exits or the worker stops.
func (r *Runtime) Exec(ctx context.Context, h workerruntime.Handle, argv []string) (workerruntime.Session, error) {
	if len(argv) == 0 {
		return nil, errors.New("exec: empty argv")
	}
	if h.ID == "" {
		return nil, fmt.Errorf("exec: no container: %w", workerruntime.ErrNotFound)
	}
	created, err := r.engine.ExecCreate(ctx, h.ID, client.ExecCreateOptions{
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		WorkingDir:   workerruntime.WorkspacePath,
		Cmd:          argv,
	})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return nil, fmt.Errorf("exec %s in container %s: worker is not running: %w", argv[0], h.ID, err)
		}
		return nil, fmt.Errorf("exec %s in container %s: %w", argv[0], h.ID, notFound(err))
	}
	attached, err := r.engine.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("exec %s in container %s: attaching: %w", argv[0], h.ID, err)
	}
	log := r.logger.With(slog.String("container", h.ID), slog.String("exec", created.ID), slog.String("argv0", argv[0]))
	stdoutR, stdoutW := io.Pipe()
	s := &session{
		conn:       attached.HijackedResponse,
		stdout:     stdoutR,
		streamDone: make(chan struct{}),
		exited:     make(chan struct{}),
	}
	sctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	stderr := &lineLogger{log: log}
	go func() {
		_, err := stdcopy.StdCopy(stdoutW, stderr, attached.Reader)
		stderr.flush()
		stdoutW.CloseWithError(err) // nil: the reader sees io.EOF
		close(s.streamDone)
	}()
	go s.waitExit(sctx, r.engine, created.ID)
	// The connection is what keeps the process's stdin open; close it when
	// the session ends or its context does.
	context.AfterFunc(sctx, func() { s.conn.Close() })
	// And when the worker stops: not every OCI runtime ends an exec's
	// stream with its container (gVisor's runsc does not).
	wait := r.engine.ContainerWait(sctx, h.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	go func() {
		select {
		case <-wait.Result:
			cancel()
		case err := <-wait.Error:
			_ = err // the session ended, or the engine cannot say: nothing to do
		}
	}()
	return s, nil
}

// session is one exec'd process. Read reads its stdout, Write writes its
// stdin.
type session struct {
	conn       client.HijackedResponse
	stdout     *io.PipeReader
	streamDone chan struct{} // the output stream ended
	exited     chan struct{} // code and err are set
	code       int
	err        error
	cancel     context.CancelFunc
	writeMu    sync.Mutex
}

var _ workerruntime.Session = (*session)(nil)

func (s *session) Read(p []byte) (int, error) { return s.stdout.Read(p) }

func (s *session) Write(p []byte) (int, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.conn.Conn.Write(p)
}

// CloseWrite half-closes the connection, which the engine turns into end of
// input on the process's stdin.
func (s *session) CloseWrite() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	cw, ok := s.conn.Conn.(client.CloseWriter)
	if !ok {
		return fmt.Errorf("closing stdin: the engine connection (%T) cannot be half-closed: %w", s.conn.Conn, errors.ErrUnsupported)
	}
	if err := cw.CloseWrite(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("closing stdin: %w", err)
	}
	return nil
}

// Close ends the session: stdin, stdout and the connection.
func (s *session) Close() error {
	s.cancel() // closes the connection, which ends the output stream
	_ = s.stdout.CloseWithError(io.ErrClosedPipe)
	return nil
}

// Wait returns the exit code once the process has exited. The output stream
// must be read (or the session closed) for that to be seen, as with os/exec.
func (s *session) Wait() (int, error) {
	<-s.exited
	return s.code, s.err
}

// waitExit records the exit code. The end of the output stream says the
// process has (almost certainly) exited; the engine may take a moment to
// say so too, hence the polling. Polling only after the stream ends keeps a
// long-lived session from costing an API call per interval.
func (s *session) waitExit(ctx context.Context, engine EngineClient, execID string) {
	defer close(s.exited)
	select {
	case <-s.streamDone:
	case <-ctx.Done():
		s.err = fmt.Errorf("exec %s: session closed before the process exited: %w", execID, context.Cause(ctx))
		return
	}
	// Polling stops when the session is closed: whoever closes it before
	// Wait has returned has given up on the exit code.
	ctx, cancel := context.WithTimeout(ctx, execExitTimeout)
	defer cancel()
	delay := 10 * time.Millisecond
	for {
		res, err := engine.ExecInspect(ctx, execID, client.ExecInspectOptions{})
		if err != nil {
			s.err = fmt.Errorf("exec %s: waiting for the exit code: %w", execID, err)
			return
		}
		if !res.Running {
			s.code = res.ExitCode
			return
		}
		select {
		case <-ctx.Done():
			// Closed, or still running execExitTimeout after its output ended.
			s.err = fmt.Errorf("exec %s: no exit code: %w", execID, ctx.Err())
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// execExitTimeout bounds the wait for a process whose output has ended (a
// process that closed stdout but lives on, or a daemon child holding it).
const execExitTimeout = 30 * time.Second

// lineLogger logs what is written to it (an exec'd process's stderr), a
// line per record.
type lineLogger struct {
	log *slog.Logger
	buf []byte
}

// maxLogLine cuts lines so that a process writing megabytes without a newline
// cannot grow the buffer without bound.
const maxLogLine = 4096

func (l *lineLogger) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := maxLogLine - len(l.buf)
			if len(p) < room {
				l.buf = append(l.buf, p...)
				break
			}
			l.buf = append(l.buf, p[:room]...)
			p = p[room:]
			l.flush()
			continue
		}
		l.buf = append(l.buf, p[:i]...)
		p = p[i+1:]
		l.flush()
	}
	return n, nil
}

func (l *lineLogger) flush() {
	if len(l.buf) == 0 {
		return
	}
	l.log.Debug("exec stderr", slog.String("line", string(l.buf)))
	l.buf = l.buf[:0]
}
