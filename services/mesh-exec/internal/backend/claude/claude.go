// Package claude is the mesh-exec backend for Anthropic's Claude Code CLI,
// run headless:
//
//	claude -p --output-format stream-json --verbose [--resume ID] [--model M]
//	       [--max-turns N] [--allowedTools A,B] [--append-system-prompt TEXT]
//	       [--mcp-config PATH] -- TASK
//
// The task comes last, after "--", instead of right after -p: -p is a
// boolean flag (see `claude --help`, testdata/claude-code-2.1.330/help.txt),
// so the prompt is a positional argument, and in that place a task such as
// "--dangerously-skip-permissions" would be read as a flag, and one after
// the variadic --allowedTools or --mcp-config would be swallowed as a value.
// --max-turns is not in --help but the CLI accepts it (a hidden option).
//
// The output is JSON Lines (stream-json): a system/init event with the
// session id, assistant and user messages whose content blocks are text,
// tool_use and tool_result, and a final result event; see parser.go. The
// captures in testdata/claude-code-2.1.330 are the ground truth for it, and
// the fake CLI in services/mesh-exec/testdata/fakeclaude reproduces them.
package claude

import (
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Config configures the claude backend.
type Config struct {
	// Binary is the Claude Code executable, a name looked up in PATH or a
	// path. Defaults to "claude".
	Binary string
}

// Backend runs Claude Code. It is stateless and safe for concurrent use.
type Backend struct {
	cfg Config
}

var _ backend.Backend = (*Backend)(nil)

// New returns the claude backend.
func New(cfg Config) *Backend {
	if cfg.Binary == "" {
		cfg.Binary = "claude"
	}
	return &Backend{cfg: cfg}
}

// Name returns "claude", the backend's name in worker definitions.
func (b *Backend) Name() string { return "claude" }

// Forks reports that claude forks a session: --resume with --fork-session
// continues a copy under a new id.
func (b *Backend) Forks() bool { return true }

// NewParser returns a parser for one run's stream-json output, in the
// run's repository, with hooks if the run has hook settings.
func (b *Backend) NewParser(req backend.Request) backend.Parser {
	p := newParser(req.Repository)
	p.hooked = req.HookSettings != ""
	return p
}
