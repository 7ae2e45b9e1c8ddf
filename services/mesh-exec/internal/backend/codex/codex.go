// Package codex is the mesh-exec backend for the OpenAI Codex CLI, run
// headless as `codex exec --json`.
//
// A new session is
//
//	codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox [--model=M] -- TASK
//
// and a resume is the same with `resume SESSION_ID` before the `--`. The
// flags go before the `resume` subcommand: older releases only parsed them
// there (openai/codex#3817), current ones accept both places. The `--` keeps
// a task that starts with "-" or reads "resume"/"review" from being taken for
// a flag or a subcommand.
//
// Approvals and sandbox: `codex exec` never asks for approval, and its default
// sandbox is read-only, so it could not edit the repository. Codex's own
// sandbox (bubblewrap or Landlock) needs user namespaces that Docker's default
// seccomp profile refuses, so inside a mesh-exec container every command would
// fail (openai/codex#17337, #9292, #6828). mesh-exec already runs the agent in
// a hardened container as a non-root user, which is the "externally
// sandboxed environment" that --dangerously-bypass-approvals-and-sandbox is
// documented for (codex-rs/exec/src/cli.rs). --full-auto, the older choice, is
// deprecated in favour of --sandbox workspace-write and would hit the same
// namespace problem. --skip-git-repo-check lets the agent work in a repository
// that is not a Git checkout.
//
// The output format, JSON Lines of thread.started, turn.*, item.* and error
// events, comes from docs/exec.md and codex-rs/exec/src/exec_events.rs in
// github.com/openai/codex; see parser.go.
//
// Request fields Codex has no flag for are left out: AllowedTools, MaxTurns,
// AppendSystemPrompt and MCPConfig (Codex reads MCP servers from its own
// config.toml, not from a Claude-style JSON file).
package codex

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Config configures the codex backend.
type Config struct {
	// Binary is the Codex executable, a name looked up in PATH or a path.
	// Defaults to "codex".
	Binary string
}

// Backend runs the Codex CLI.
type Backend struct {
	cfg Config
}

var _ backend.Backend = (*Backend)(nil)

// New returns a codex backend.
func New(cfg Config) *Backend {
	if cfg.Binary == "" {
		cfg.Binary = "codex"
	}
	return &Backend{cfg: cfg}
}

// Name returns "codex".
func (b *Backend) Name() string { return "codex" }

// uuidPattern is the shape of a Codex session (thread) id: a UUID, as in the
// rollout file names under ~/.codex/sessions. Codex also resumes by thread
// name; mesh-exec only ever stores the ids Codex printed, so anything else is
// refused, and with it any attempt to pass a flag as a session id.
var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ErrInvalidSessionID is returned for a session id that is not a Codex
// thread id.
var ErrInvalidSessionID = errors.New("codex: session id is not a UUID")

// Command returns the argv of a run.
func (b *Backend) Command(req backend.Request) ([]string, error) {
	if req.SessionID != "" && !uuidPattern.MatchString(req.SessionID) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidSessionID, req.SessionID)
	}
	if strings.TrimSpace(req.Task) == "" {
		return nil, errors.New("codex: the task is empty")
	}
	if req.Task == "-" {
		// Codex reads a prompt of "-" from stdin, which is /dev/null here.
		return nil, errors.New(`codex: a task of "-" means "read stdin" to codex`)
	}
	argv := []string{
		b.cfg.Binary, "exec",
		"--json",
		"--skip-git-repo-check",
		"--dangerously-bypass-approvals-and-sandbox",
	}
	if req.Model != "" {
		// One argument, so a model name cannot become a flag of its own.
		argv = append(argv, "--model="+req.Model)
	}
	if req.SessionID != "" {
		argv = append(argv, "resume", req.SessionID)
	}
	return append(argv, "--", req.Task), nil
}

// NewParser returns a parser for one run's stdout.
func (b *Backend) NewParser(req backend.Request) backend.Parser {
	return newParser(req)
}
