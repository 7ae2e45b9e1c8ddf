// Package servicetest runs a Meshwork service's binary for tests: it starts
// the command, reads its JSON log on stderr until the service logs the
// address it listens on, and stops it (SIGTERM, then SIGKILL after a grace
// period) when asked or when the test ends. Only tests import it.
package servicetest

import (
	"bufio"
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
	mu     sync.Mutex
	log    bytes.Buffer
}

// Start starts cmd, whose Stderr must be unset, and waits until it logs a
// JSON line with an "addr" (and the message msg, when msg is not empty).
// The test fails if the process exits first or takes over a minute. The
// process is stopped, with 15 seconds' grace, when the test ends.
func Start(tb testing.TB, cmd *exec.Cmd, msg string) *Process {
	tb.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", cmd.Path, err)
	}
	p := &Process{Cmd: cmd, exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			if p.log.Len() < maxLog {
				p.log.WriteString(sc.Text() + "\n")
			}
			p.mu.Unlock()
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Addr != "" && (msg == "" || line.Msg == msg) {
				select {
				case addr <- line.Addr:
				default:
				}
			}
		}
		_ = cmd.Wait()
	}()
	tb.Cleanup(func() { p.Stop(15 * time.Second) })
	select {
	case p.Addr = <-addr:
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
func (p *Process) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}
