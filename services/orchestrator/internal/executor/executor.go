// Package executor is the seam between the orchestrator's engine and whoever
// does a node's work: an agent behind mesh-exec's mesh_execute (package
// executor/mesh) or a worker of the marketplace (package executor/marketplace).
// The engine declares what it needs here; each implementation is an MCP
// client on the official SDK.
package executor

import (
	"context"
	"errors"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// Request is one attempt of one agent node (or one item of a foreach node).
type Request struct {
	// RunID, NodeID, Iteration and Attempt identify the attempt, for logs
	// and for names the executor derives (a marketplace journey).
	RunID     string
	NodeID    string
	Iteration int
	Attempt   int
	// Thread is the run's thread: runs on one thread share their roles'
	// sessions (and a marketplace role's journey).
	Thread string
	// Item is empty for a node, and "<node id>/<index>" for one item of a
	// foreach node: items run apart from the role's session (each in its
	// own, or its own marketplace journey), possibly at once.
	Item string
	// RoleName and Role say who does the work.
	RoleName string
	Role     pipeline.Role
	// Task is the rendered task.
	Task string
	// SessionID continues the role's agent session; empty starts one.
	SessionID string
	// ForkSession continues a copy of SessionID, leaving it as it was: the
	// session came with a fork's checkpoint, and the run it came from may
	// go on in it (roles via mesh; a marketplace journey is the thread's).
	ForkSession bool
	// Timeout bounds the attempt; 0 means none beyond the context's.
	Timeout time.Duration
	// Source seeds the worker's workspace (roles via marketplace); nil for
	// none.
	Source *Source
	// Command, when set, runs in the worker (an exec action) instead of
	// Task.
	Command []string
	// OnSession, when set, is called as soon as the agent reports its
	// session id, before the attempt ends, so that a crash in the middle of
	// the node can resume the same session. It may be called more than once
	// with the same id.
	OnSession func(sessionID string)
	// OnWorker, when set, is called with each worker the attempt uses that
	// outlives it (a marketplace journey), before the attempt starts or
	// uses it, so that the run can have it stopped once the run settles
	// (Releaser). An error fails the attempt before the worker starts.
	OnWorker func(id string) error
	// OnEvent, when set, is called with each event the agent reports while
	// the attempt runs (its tool calls, with the gate's decisions), in
	// order, never after Execute returned. It should be quick: the
	// executor's MCP client delivers notifications one at a time.
	OnEvent func(meshtype.AgentEvent)
}

// Source is where a marketplace role's workspace comes from: a repository
// (seeding the role's journey when it is first spawned) or another role's
// journey plus a patch (seeding the workspace afresh for every attempt).
type Source struct {
	// Repository is a spawn_worker source ({"git": ...} or {"archive":
	// ...}), from an input of type repository.
	Repository map[string]any
	// FromRole and FromWorker name the role whose journey on this thread
	// holds the base the patch applies to, FromRepository the repository
	// that role was seeded from (nil for none); Patch is that node's patch.
	FromRole, FromWorker string
	FromRepository       map[string]any
	// FromThread is the thread whose journey of FromRole made the patch:
	// a fork's node whose from node ran before the fork's checkpoint
	// finds that journey on the thread of the run it was forked from.
	// Empty: the request's thread.
	FromThread string
	Patch      string
}

// Result is what an attempt produced.
type Result struct {
	// Patch is the worker's change to its workspace (a git-format diff
	// against its base), for attempts with a Source.
	Patch string
	// PatchOmits lists the changed files Patch leaves out, too large for
	// a patch.
	PatchOmits []string
	// Output is the agent's reply.
	Output string
	// SessionID is the role's session after the attempt; empty when the
	// executor has none.
	SessionID string
	// CostUSD is what the attempt cost, when the agent says.
	CostUSD float64
	// Journey is the marketplace journey the attempt worked in (roles via
	// marketplace): its workspace holds Patch's change whole, and an
	// Exporter takes it out. ChangeDigest is the digest of that workspace
	// as the attempt left it (meshtype.ChangeSummary.Digest).
	Journey      string
	ChangeDigest string
}

// Executor runs agent nodes. Implementations are safe for concurrent use.
type Executor interface {
	// Execute runs one attempt. An error is a failed attempt, retried under
	// the node's retry policy; its text is recorded. A Result may come with
	// an error (the agent reported a failure), carrying the partial output
	// and the session.
	Execute(ctx context.Context, req Request) (Result, error)
}

// Releaser is an executor whose workers outlive an attempt
// (Request.OnWorker). Release stops a worker, keeping what a later attempt
// goes on with (a journey's workspace and agent session): its runs
// settled, and a later attempt starts it again. A worker that is gone
// already is not an error.
type Releaser interface {
	Release(ctx context.Context, id string) error
}

// Exporter is an executor whose workers keep a workspace a user can take
// out whole (Result.Journey), files too large for a patch included.
type Exporter interface {
	// Export takes journey's workspace out in format "tar" (its files) or
	// "bundle" (a git bundle of one commit on its git source's commit),
	// through the worker's result gate. An error that is a
	// *meshapi.Error carries the service's code: not_found (the journey
	// or its workspace is gone), invalid_argument (no git source for a
	// bundle, too large), permission_denied (the result gate refused);
	// one that is ErrUnreachable, the service did not answer.
	Export(ctx context.Context, journey, format string) (Export, error)
}

// Export is a worker's workspace, taken out.
type Export struct {
	// Digest is the digest of the workspace exported, taken with it: a
	// later attempt in the same worker may have changed it since the
	// attempt whose Result.ChangeDigest the caller holds.
	Digest string
	// Content is the tar or the bundle; SHA256 its hex digest; Commit,
	// for a bundle, the commit it holds (as refs/heads/meshwork).
	Content []byte
	SHA256  string
	Commit  string
}

// ErrUnreachable marks a call an executor could not make: its service did
// not answer (it is down, or the network between is).
var ErrUnreachable = errors.New("the service did not answer")

// ErrUnavailable marks an executor that is not configured, such as a role via
// marketplace on an orchestrator without a marketplace URL.
var ErrUnavailable = errors.New("executor not configured")

// ErrRefused marks an attempt's failure that the same attempt meets again:
// the service refused the request itself (a repository that does not
// exist, a source outside the allowed roots, a task past its size limit).
// The engine does not retry it.
var ErrRefused = errors.New("refused: trying again will not help")

// Refused marks err as a refusal (ErrRefused), keeping it, and what it
// wraps, as it is.
func Refused(err error) error { return refusedError{err} }

type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{e.err, ErrRefused} }
