// Package workerruntime is the seam between the marketplace and whatever runs
// workers: one [Runtime] interface, with one subpackage per implementation
// (docker: hardened containers through the Docker Engine API; process: plain
// subprocesses for machines without Docker) and a conformance suite,
// runtimetest, that every implementation passes.
//
// A worker is one long-lived main process (it idles) plus a workspace that
// outlives it. The marketplace talks to the worker through [Runtime.Exec]
// sessions: it keeps one open per journey and opens a new one if it breaks.
package workerruntime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Labels on everything a runtime creates. Reconciliation finds the
// marketplace's containers and volumes by them.
const (
	LabelJourney = "meshwork.journey" // journey uid
	LabelWorker  = "meshwork.worker"  // worker definition id
)

// WorkspacePath is where the workspace is mounted inside a worker.
const WorkspacePath = "/workspace"

// MaxLogBytes bounds what Logs returns: the last bytes of the tail asked
// for. A worker's output is its own, and one that logs every request it
// serves would otherwise make worker_logs a read of hundreds of megabytes.
const MaxLogBytes = 1 << 20

// ErrNotFound is returned when a worker or its workspace does not exist.
var ErrNotFound = errors.New("runtime: not found")

// ErrReadCut is returned by ExportWorkspace when the worker was removed
// while its workspace was read through it: what was written may be cut
// short, and reading again reads the workspace without the worker.
var ErrReadCut = errors.New("runtime: the worker was removed while its workspace was read")

// Spec describes one worker to create.
type Spec struct {
	// Journey is the journey uid; it names the container and the workspace
	// volume and is stored in LabelJourney.
	Journey string
	// Worker is the worker definition id, stored in LabelWorker.
	Worker string
	// Image is the image to run.
	Image string
	// Cmd is the main process's argv; nil keeps the image's command.
	Cmd []string
	// User is "uid" or "uid:gid"; never root.
	User string
	// Network is "none", "bridge", or an internal network made by a
	// Networker (egress workers).
	Network string
	// ReadonlyRootfs mounts the root filesystem read-only (with a small tmpfs
	// at /tmp).
	ReadonlyRootfs bool
	// OCIRuntime names the OCI runtime ("runc", "runsc"); "" is the engine's default.
	OCIRuntime string
	// Limits.
	CPUs        float64
	MemoryBytes int64
	PIDs        int64
	// KeepStdinOpen gives the main process a stdin that stays open and
	// silent, so a stdio server used as the main process (a kind: mcp image)
	// idles instead of exiting on end of input.
	KeepStdinOpen bool
	// Init puts the engine's init (tini) in front of Cmd as PID 1, to reap
	// zombies. Meshwork's own worker images need none: their idle command
	// is their init, and unlike tini it cannot be traced or written to by
	// the commands a worker runs (package proctree). A kind: mcp image's
	// own command is no init.
	Init bool
	// Env is extra environment, "KEY=value".
	Env []string
	// Labels are extra labels (tests add meshwork.test).
	Labels map[string]string
}

// Handle names a created worker.
type Handle struct {
	// ID is the container id (docker) or an opaque id (process).
	ID string
	// Workspace is the workspace volume name (docker) or directory (process).
	Workspace string
}

// State is a worker's state as the runtime sees it.
type State string

// The states.
const (
	StateRunning State = "running"
	StateStopped State = "stopped"
	StateMissing State = "missing"
)

// Listed is one worker found by List.
type Listed struct {
	Handle
	Journey string
	Worker  string
	State   State
}

// Session is one exec'd process in a worker: its stdin and stdout as a pipe
// (Read reads stdout, Write writes stdin); stderr is discarded or logged.
type Session interface {
	io.ReadWriteCloser
	// CloseWrite closes the process's stdin.
	CloseWrite() error
	// Wait waits for the process to exit and returns its exit code.
	Wait() (int, error)
}

// RemoveOptions say what Remove deletes besides the worker.
type RemoveOptions struct {
	// Workspace also deletes the workspace.
	Workspace bool
}

// Networker is what a runtime that can put workers on an internal network
// (egress workers) also does. The Docker runtime is one; the process
// runtime is not.
type Networker interface {
	// EnsureInternalNetwork makes the internal network name (no route
	// out) if it does not exist, and returns the host's address on it.
	EnsureInternalNetwork(ctx context.Context, name string, labels map[string]string) (gateway string, err error)
	// Address is a worker's address on network.
	Address(ctx context.Context, h Handle, network string) (string, error)
}

// Exit is how a stopped worker ended, as far as its runtime knows.
type Exit struct {
	// Code is the exit status of the worker's main process; 128+N when a
	// signal N killed it.
	Code int
	// OOMKilled: the kernel killed it for passing its memory limit.
	OOMKilled bool
	// Error is what the runtime said went wrong starting or running it.
	Error string
}

// String says how the worker ended, for a client's error message.
func (e Exit) String() string {
	switch {
	case e.OOMKilled:
		return "it ran out of memory (isolation.resources.memory) and was killed"
	case e.Error != "":
		return "its runtime reported: " + e.Error
	case e.Code > 128 && e.Code < 128+65:
		return fmt.Sprintf("it was killed by signal %d (exit code %d)", e.Code-128, e.Code)
	default:
		return fmt.Sprintf("it exited with code %d", e.Code)
	}
}

// ExitReporter is what a runtime that can say how a stopped worker ended
// also does. The Docker runtime is one; the process runtime, whose workers
// have no main process, is not.
type ExitReporter interface {
	// Exit says how the stopped worker h ended. ok is false when h is
	// running or its end is not known; a missing h is ErrNotFound.
	Exit(ctx context.Context, h Handle) (e Exit, ok bool, err error)
}

// Runtime creates and runs workers.
type Runtime interface {
	// Name is "docker" or "process".
	Name() string
	// Create creates and starts a worker. An existing workspace for the
	// journey is reused (resume), a missing one is created.
	Create(ctx context.Context, spec Spec) (Handle, error)
	// Start starts a stopped worker again.
	Start(ctx context.Context, h Handle) error
	// Stop stops a worker, giving its processes grace to exit; the workspace is kept.
	Stop(ctx context.Context, h Handle, grace time.Duration) error
	// Remove removes a worker (stopping it first) and, if asked, its workspace.
	// Removing what is already gone is not an error.
	Remove(ctx context.Context, h Handle, opts RemoveOptions) error
	// State reports whether the worker is running, stopped or missing.
	State(ctx context.Context, h Handle) (State, error)
	// Exec starts argv in the running worker, in WorkspacePath, as the worker's user.
	Exec(ctx context.Context, h Handle, argv []string) (Session, error)
	// List returns every worker carrying LabelJourney (and, if given, the
	// extra label filter), in any state.
	List(ctx context.Context, labels map[string]string) ([]Listed, error)
	// Logs returns up to tail lines of the worker's main process output.
	Logs(ctx context.Context, h Handle, tail int) ([]byte, error)
	// ExportWorkspace writes the workspace's contents as a tar stream.
	ExportWorkspace(ctx context.Context, h Handle, w io.Writer) error
	// SeedWorkspace unpacks a tar stream into the workspace of a created
	// worker, keeping the owners and modes its headers give. The tar comes
	// from the marketplace's own checked base (package bases), never from a
	// client directly.
	SeedWorkspace(ctx context.Context, h Handle, tar io.Reader) error
}
