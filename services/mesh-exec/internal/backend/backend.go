// Package backend is the seam between mesh-exec and the coding-agent CLIs it
// runs: one [Backend] interface, one subpackage per CLI (claude, codex,
// opencode, gemini, command), and a conformance suite, backendtest, that every
// backend passes against a scripted stand-in for its CLI.
//
// A backend only translates: it builds the argv for a run and parses the
// CLI's output stream into normalized [Event]s and a final [Result]. Running
// the process (working directory, environment, timeouts, killing the process
// group) is the runner's job, the same for every backend.
package backend

import (
	"errors"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Kind is a normalized event kind.
type Kind string

// The normalized event kinds.
const (
	KindInit       Kind = "init"        // the session started or resumed; SessionID is set
	KindText       Kind = "text"        // assistant text
	KindToolUse    Kind = "tool_use"    // the agent called a tool
	KindToolResult Kind = "tool_result" // a tool call returned
	KindResult     Kind = "result"      // the run finished (the CLI's own final event)
	KindError      Kind = "error"       // the CLI reported an error

	// Reported by the agent CLI's hooks (Request.HookSettings), with a
	// human verb in Text ("Editing main.go", "Running go test ./...").
	KindPreTool           Kind = "pre_tool"           // a tool call was checked before it ran; Decision says how
	KindPostTool          Kind = "post_tool"          // a tool call ran
	KindToolError         Kind = "tool_error"         // a tool call ran and failed
	KindStop              Kind = "stop"               // the agent finished its turn
	KindNotification      Kind = "notification"       // the CLI notified the user; Text is its message
	KindPermissionRequest Kind = "permission_request" // the CLI asked for permission to use Tool
)

// FromHook reports whether events of kind k come from the CLI's hooks.
func (k Kind) FromHook() bool {
	switch k {
	case KindPreTool, KindPostTool, KindToolError, KindStop, KindNotification, KindPermissionRequest:
		return true
	}
	return false
}

// ToolDecision is the gate's decision on one tool call of the agent, as the
// hook reported it (the wire type, shared with the marketplace).
type ToolDecision = meshtype.ToolDecision

// Forker is a Backend that can fork a session (Request.ForkSession).
type Forker interface {
	Forks() bool
}

// Event is one normalized event of an agent run, for progress reporting.
type Event struct {
	Kind      Kind
	SessionID string // when the event carries one
	Text      string // text, tool result text, or error message
	Tool      string // tool_use and tool_result: the tool's name, when known
	// ToolCallID is the id the CLI gave a tool call, on its tool_use and its
	// tool_result alike, when the CLI gives one: it pairs a result with its
	// call when an agent runs several tools at once.
	ToolCallID string
	IsError    bool // tool_result or error
	// Decision is set on pre_tool events.
	Decision *ToolDecision
}

// Request is one run of an agent CLI.
type Request struct {
	// Repository is the absolute directory the agent works in (its cwd).
	Repository string
	// Task is the prompt.
	Task string
	// SessionID resumes that session when set; empty starts a new one.
	SessionID string
	// ForkSession, with SessionID, continues a copy of the session under a
	// new id, the session itself left as it was; only for a backend that
	// is a Forker.
	ForkSession bool
	// NewSessionID is the id a new session takes (SessionID empty) with a
	// CLI that lets its caller name it: one per run, given by the runner,
	// so that the run's command line and its parser agree on it. Backends
	// whose CLI picks its own ignore it.
	NewSessionID string
	Settings
}

// ForRun is req as one run takes it: a new session gets its id here
// (NewSessionID), once, so that the run's command line and its parser,
// made in two calls, agree on it.
func ForRun(req Request) Request {
	if req.SessionID == "" && req.NewSessionID == "" {
		req.NewSessionID = uuid.NewString()
	}
	return req
}

// Settings are the agent settings of a run, the same for every run of a
// mesh-exec (its operator sets them).
type Settings struct {
	// Model, AllowedTools, MaxTurns and AppendSystemPrompt are passed on when
	// the CLI supports them; zero values are left out.
	Model              string
	AllowedTools       []string
	MaxTurns           int
	AppendSystemPrompt string
	// MCPConfig is the path of an MCP client config file to give the agent
	// (recursive composition); empty gives none.
	MCPConfig string
	// HookSettings are settings (JSON) whose hooks check each tool call
	// before it runs; a backend whose CLI takes hooks passes them on and
	// asks for the hooks' events in its stream. Empty gives none.
	HookSettings string
}

// Result is the outcome of a run, normalized.
type Result struct {
	SessionID     string
	Output        string // the agent's final answer, or the error message
	IsError       bool
	CostUSD       float64
	DurationMS    int64
	NumTurns      int
	InputTokens   int64
	OutputTokens  int64
	ToolsUsed     []string // distinct tool names, in first-use order
	FilesModified []string // paths the agent wrote or edited, as the CLI reported them, distinct, in order
	// ToolDecisions are the hooks' decisions on the agent's tool calls, in
	// order; none without Request.HookSettings.
	ToolDecisions []ToolDecision
	// Err classifies a failed run for callers that branch on it (nil on
	// success or an unclassified failure): ErrNotLoggedIn, ErrSessionNotFound.
	Err error
}

// ErrRequestRefused marks a Command error about the request, not the
// backend: a session id of another shape, a resume a CLI cannot do. Its
// caller is told invalid_argument, not that mesh-exec failed.
var ErrRequestRefused = errors.New("not a request this backend takes")

// Errors a Result can be classified with.
var (
	// ErrNotLoggedIn: the CLI has no credentials.
	ErrNotLoggedIn = errors.New("the agent CLI is not logged in")
	// ErrSessionNotFound: --resume named a session the CLI does not have.
	ErrSessionNotFound = errors.New("the agent CLI has no such session")
)

// Backend is one agent CLI.
type Backend interface {
	// Name is the backend's name in worker definitions: "claude", "codex", ...
	Name() string
	// Command returns the argv of a run; argv[0] is the CLI's executable name
	// or path. It refuses requests the CLI cannot honour (say, a resume on a
	// CLI without sessions) with a clear error.
	Command(req Request) ([]string, error)
	// NewParser returns a parser for one run's stdout.
	NewParser(req Request) Parser
}

// Parser reads one run's output stream.
type Parser interface {
	// Line parses one line of stdout into zero or more events. Lines it does
	// not understand (unknown event types, blank lines, non-JSON noise) yield
	// nothing and no error: CLIs add event types over time. It must never
	// panic, whatever the line.
	Line(line []byte) []Event
	// Finish returns the run's result once the process exited. exitCode is
	// the process's; stderr is the tail of what it wrote there. When the CLI
	// printed no final result, Finish builds one from the exit code and
	// stderr (IsError true).
	Finish(exitCode int, stderr string) Result
}
