// Package servicetest runs a Meshwork service's binary for tests: it starts
// the command, reads its JSON log on stderr until the service logs the
// address it listens on, and stops it (SIGTERM, then SIGKILL after a grace
// period) when asked or when the test ends. Only tests import it.
package servicetest

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// maxLog bounds the log a Process keeps, to say why it failed.
const maxLog = 1 << 20

// Process is a running service.
type Process struct {
	// Cmd is the command; Addr the address it logged.
	Cmd  *exec.Cmd
	Addr string

	exited chan struct{}
	log    *logWriter
}

// Start starts cmd, whose Stderr must be unset, and waits until it logs a
// JSON line with an "addr" (and the message msg, when msg is not empty).
// The test fails if the process exits first or takes over a minute. The
// process is stopped, with 15 seconds' grace, when the test ends.
func Start(tb testing.TB, cmd *exec.Cmd, msg string) *Process {
	tb.Helper()
	p := &Process{Cmd: cmd, exited: make(chan struct{}), log: &logWriter{msg: msg, addr: make(chan string, 1)}}
	// The log is copied by exec's own goroutine, which Wait waits for; a
	// child that keeps stderr open delays Wait by WaitDelay at most.
	cmd.Stderr, cmd.WaitDelay = p.log, 2*time.Second
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", cmd.Path, err)
	}
	go func() {
		defer close(p.exited)
		_ = cmd.Wait()
	}()
	tb.Cleanup(func() { p.Stop(15 * time.Second) })
	select {
	case p.Addr = <-p.log.addr:
		return p
	case <-p.exited:
		tb.Fatalf("%s exited before serving:\n%s", cmd.Path, p.Log())
	case <-time.After(time.Minute):
		tb.Fatalf("%s did not start serving within a minute:\n%s", cmd.Path, p.Log())
	}
	return nil
}

// Stop ends the process as a deployment would (SIGTERM), and kills it if it
// has not exited after grace. It returns once the process is gone.
func (p *Process) Stop(grace time.Duration) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill crashes the process (SIGKILL) and returns once it is gone.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.exited
}

// Exited is closed once the process is gone.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Log is what the process logged so far (its first MiB).
func (p *Process) Log() string { return p.log.String() }

// logWriter keeps a service's log and finds, line by line, the address it
// serves on.
type logWriter struct {
	msg  string
	addr chan string // the first address logged

	mu      sync.Mutex
	kept    bytes.Buffer // the first maxLog bytes
	partial []byte       // a line not ended yet
	found   bool
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if room := maxLog - w.kept.Len(); room > 0 {
		w.kept.Write(b[:min(len(b), room)])
	}
	if w.found {
		return len(b), nil
	}
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			if len(w.partial) > maxLog { // no line this long is a log line
				w.partial = w.partial[:0]
			}
			return len(b), nil
		}
		var line struct{ Msg, Addr string }
		if json.Unmarshal(w.partial[:i], &line) == nil && line.Addr != "" && (w.msg == "" || line.Msg == w.msg) {
			w.found = true
			w.addr <- line.Addr
			w.partial = nil
			return len(b), nil
		}
		w.partial = w.partial[i+1:]
	}
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kept.String()
}
