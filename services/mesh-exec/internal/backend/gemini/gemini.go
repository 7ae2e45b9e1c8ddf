// Package gemini is the mesh-exec backend for Google's Gemini CLI
// (github.com/google-gemini/gemini-cli), run headless as
//
//	gemini --output-format=stream-json --approval-mode=yolo [--model=M] [--resume=SESSION_ID] --prompt=TASK
//
// Every value travels in the same argument as its flag (--prompt=TASK), so a
// task or model that starts with "-" cannot be read as a flag by yargs. The
// prompt goes through --prompt rather than as a positional argument because
// with --resume only --prompt (or stdin) is accepted
// (google-gemini/gemini-cli#14180).
//
// Approvals: headless Gemini CLI cannot ask, so a tool call that needs
// approval is refused. mesh-exec runs the agent inside an isolated container,
// so it approves them all with --approval-mode=yolo (docs/cli/cli-reference;
// --yolo is its deprecated spelling). YOLO only removes prompts; Gemini's own
// sandbox stays off unless configured, which is what we want inside a
// container already.
//
// The output format, JSON Lines of init, message, tool_use, tool_result,
// error and result events, comes from docs/cli/headless.md and
// packages/core/src/output/types.ts; see parser.go.
//
// Request fields Gemini CLI has no flag for are left out: AllowedTools (in
// YOLO mode every tool is allowed anyway), MaxTurns (a settings.json key,
// model.maxSessionTurns), AppendSystemPrompt and MCPConfig (Gemini reads MCP
// servers from its settings.json).
package gemini

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Config configures the gemini backend.
type Config struct {
	// Binary is the Gemini CLI executable, a name looked up in PATH or a
	// path. Defaults to "gemini".
	Binary string
	// ApprovalMode is passed as --approval-mode. Defaults to "yolo"; "auto_edit"
	// approves file edits only, so shell commands are refused.
	ApprovalMode string
	// SkipTrust passes --skip-trust, which trusts the repository for the
	// run. Releases with folder trust enabled drop an untrusted folder back
	// to the default approval mode, that is to refusing every tool headless.
	// Defaults to false: releases without the flag reject it.
	SkipTrust bool
}

// Backend runs the Gemini CLI.
type Backend struct {
	cfg Config
}

var _ backend.Backend = (*Backend)(nil)

// New returns a gemini backend.
func New(cfg Config) *Backend {
	if cfg.Binary == "" {
		cfg.Binary = "gemini"
	}
	if cfg.ApprovalMode == "" {
		cfg.ApprovalMode = "yolo"
	}
	return &Backend{cfg: cfg}
}

// Name returns "gemini".
func (b *Backend) Name() string { return "gemini" }

// uuidPattern is the shape of a Gemini CLI session id, a UUID (the init
// event's session_id). --resume also takes "latest" or an index; mesh-exec
// only ever stores the ids Gemini printed, so anything else is refused, and
// with it any attempt to smuggle a flag.
var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ErrInvalidSessionID is returned for a session id that is not a Gemini CLI
// session id.
var ErrInvalidSessionID = errors.New("gemini: session id is not a UUID")

// Command returns the argv of a run.
func (b *Backend) Command(req backend.Request) ([]string, error) {
	if req.SessionID != "" && !uuidPattern.MatchString(req.SessionID) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidSessionID, req.SessionID)
	}
	if strings.TrimSpace(req.Task) == "" {
		return nil, errors.New("gemini: the task is empty")
	}
	argv := []string{b.cfg.Binary, "--output-format=stream-json", "--approval-mode=" + b.cfg.ApprovalMode}
	if b.cfg.SkipTrust {
		argv = append(argv, "--skip-trust")
	}
	if req.Model != "" {
		argv = append(argv, "--model="+req.Model)
	}
	if req.SessionID != "" {
		argv = append(argv, "--resume="+req.SessionID)
	}
	return append(argv, "--prompt="+req.Task), nil
}

// NewParser returns a parser for one run's stdout.
func (b *Backend) NewParser(req backend.Request) backend.Parser {
	return newParser(req)
}
