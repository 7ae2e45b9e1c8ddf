// Package hookwire carries hook events from the agent CLI's hook command to
// mesh-exec serve, which decides them with the policy it compiled once, and
// the answers back: the fast path of package agenthook.
//
// Starting `mesh-exec hook` for every tool call costs a process of
// mesh-exec's size and a compile of the policy's CEL rules, several
// milliseconds a call. The hook command is instead mesh-exec-hook, a small
// program (this package and the standard library only) that hands the
// event to mesh-exec serve over a Unix socket in the abstract namespace
// (named by SocketEnv in the agent CLI's environment) and prints the
// answer. It fails closed: when it cannot get an answer it exits with
// status 2, which blocks the tool call.
package hookwire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// SocketEnv names the socket (an abstract Unix socket, "@meshwork-hook-…")
// where mesh-exec serve answers hook events.
const SocketEnv = "MESHWORK_HOOK_SOCKET"

// MaxEvent bounds an event (a Write's content is in it); MaxAnswer an
// answer.
const (
	MaxEvent  = 64 << 20
	MaxAnswer = 1 << 20
)

// askTimeout bounds one answer; the agent CLI's own hook timeout is longer.
const askTimeout = 20 * time.Second

// Answer is what the hook says for one event: its exit status, and what it
// prints.
type Answer struct {
	Code   int    `json:"code"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

// Write prints the answer and returns its exit status; a failed write
// blocks the tool.
func (a Answer) Write(stdout, stderr io.Writer) int {
	if a.Stdout != "" {
		if _, err := io.WriteString(stdout, a.Stdout); err != nil {
			_, _ = fmt.Fprintf(stderr, "Meshwork gate: writing the decision: %v\n", err)
			return 2
		}
	}
	if a.Stderr != "" {
		_, _ = io.WriteString(stderr, a.Stderr)
	}
	return a.Code
}

// Refuse is the answer of a hook that could not decide: exit status 2.
func Refuse(err error) Answer {
	return Answer{Code: 2, Stderr: fmt.Sprintf("Meshwork gate: %v; the tool call is refused\n", err)}
}

// ReadEvent reads a hook event from r, bounded.
func ReadEvent(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxEvent+1))
	if err != nil {
		return nil, fmt.Errorf("reading the hook event: %w", err)
	}
	if len(data) > MaxEvent {
		return nil, fmt.Errorf("the hook event is over %d bytes", MaxEvent)
	}
	return data, nil
}

// Run is mesh-exec-hook: it reads the event on stdin, asks the socket
// SocketEnv names, prints the answer and returns its exit status (2 when
// anything fails).
func Run(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	event, err := ReadEvent(stdin)
	if err != nil {
		return Refuse(err).Write(stdout, stderr)
	}
	addr := getenv(SocketEnv)
	if addr == "" {
		return Refuse(fmt.Errorf("%s is not set", SocketEnv)).Write(stdout, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), askTimeout)
	defer cancel()
	a, err := Ask(ctx, addr, event)
	if err != nil {
		return Refuse(err).Write(stdout, stderr)
	}
	return a.Write(stdout, stderr)
}

// Ask sends one event to the socket at addr and returns the answer.
func Ask(ctx context.Context, addr string, event []byte) (Answer, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", addr)
	if err != nil {
		return Answer{}, fmt.Errorf("reaching mesh-exec: %w", err)
	}
	defer func() { _ = c.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write(event); err != nil {
		return Answer{}, fmt.Errorf("sending the event: %w", err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		return Answer{}, fmt.Errorf("sending the event: %w", err)
	}
	var a Answer
	if err := json.NewDecoder(io.LimitReader(c, MaxAnswer)).Decode(&a); err != nil {
		return Answer{}, fmt.Errorf("reading the answer: %w", err)
	}
	if a.Code != 0 && a.Code != 2 {
		return Answer{}, fmt.Errorf("the answer's exit status %d is neither 0 nor 2", a.Code)
	}
	return a, nil
}

// Listen opens an abstract Unix socket with a random name, returning the
// listener and the name to put in SocketEnv. An abstract socket has no file
// a command could replace; its name is held for as long as the listener is
// open.
func Listen() (net.Listener, string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, "", err
	}
	addr := "@meshwork-hook-" + hex.EncodeToString(b)
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listening for hook events: %w", err)
	}
	return ln, addr, nil
}

// maxServing bounds the events Serve reads at once: anything in the
// container can connect, and each event may hold up to MaxEvent bytes. The
// CLI asks about one tool call at a time, or a few at once; an event past
// the bound waits its turn (its decision takes milliseconds).
const maxServing = 8

// Serve answers events on ln until it is closed: one event a connection,
// the client writing the event and closing its side, the server writing
// the answer as JSON.
func Serve(ln net.Listener, answer func(event []byte) Answer) error {
	serving := make(chan struct{}, maxServing)
	for {
		serving <- struct{}{}
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go func() {
			defer func() { <-serving }()
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(askTimeout))
			event, err := ReadEvent(c)
			a := Refuse(err)
			if err == nil {
				a = answer(event)
			}
			_ = json.NewEncoder(c).Encode(a)
		}()
	}
}
