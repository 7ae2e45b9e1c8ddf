// Package opencode is the mesh-exec backend for OpenCode
// (github.com/anomalyco/opencode, formerly sst/opencode), run headless as
//
//	opencode run --format json --auto [--model=provider/model] [--session=ses_...] -- TASK
//
// --session continues an existing session; without it `opencode run` creates
// one and reports its id as sessionID on every event. The `--` keeps a task
// that starts with "-" from being read as a flag (run.ts appends the words
// after `--` to the message). run.ts joins the message words with spaces and
// wraps a word that contains a space in double quotes, so the model sees a
// multi-word task quoted; every caller that passes the task as one argument
// gets that, and it does not change the task's meaning.
//
// Permissions: a non-interactive `opencode run` rejects every permission
// request ("permission requested: ...; auto-rejecting") unless told to
// approve them (anomalyco/opencode#41513). mesh-exec runs the agent inside an
// isolated container, so the run approves what the agent's configuration
// does not explicitly deny. The flag for that changed across releases:
// --auto in current releases ("auto-approve permissions that are not
// explicitly denied"), --dangerously-skip-permissions before 1.18
// (anomalyco/opencode#21266); see [Config.PermissionFlag].
//
// The output format, one JSON object per line with type, timestamp,
// sessionID and a payload, comes from packages/opencode/src/cli/cmd/run.ts
// (the emit() calls); see parser.go.
//
// Request fields OpenCode has no `run` flag for are left out: AllowedTools,
// MaxTurns, AppendSystemPrompt and MCPConfig (OpenCode reads MCP servers and
// permissions from its own opencode.json).
package opencode

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// Config configures the opencode backend.
type Config struct {
	// Binary is the OpenCode executable, a name looked up in PATH or a path.
	// Defaults to "opencode".
	Binary string
	// PermissionFlag is the flag that makes `opencode run` approve permission
	// requests instead of rejecting them. Defaults to "--auto" (OpenCode
	// 1.18 and later); set "--dangerously-skip-permissions" for 1.15 to 1.17,
	// or "none" to pass no flag (older releases, or an image that sets
	// OPENCODE_PERMISSION itself).
	PermissionFlag string
}

// Backend runs OpenCode.
type Backend struct {
	cfg Config
}

var _ backend.Backend = (*Backend)(nil)

// New returns an opencode backend.
func New(cfg Config) *Backend {
	if cfg.Binary == "" {
		cfg.Binary = "opencode"
	}
	if cfg.PermissionFlag == "" {
		cfg.PermissionFlag = "--auto"
	}
	return &Backend{cfg: cfg}
}

// Name returns "opencode".
func (b *Backend) Name() string { return "opencode" }

// sessionPattern is the shape of an OpenCode session id: "ses_" and an
// ascending identifier of letters and digits (ses_494719016ffe85dkDMj0FPRbHK).
// Anything else is refused, and with it any attempt to pass a flag as an id.
var sessionPattern = regexp.MustCompile(`^ses_[0-9A-Za-z]{1,64}$`)

// ErrInvalidSessionID is returned for a session id that is not an OpenCode
// session id.
var ErrInvalidSessionID = errors.New(`opencode: session id is not "ses_" and letters or digits`)

// Command returns the argv of a run.
func (b *Backend) Command(req backend.Request) ([]string, error) {
	if req.SessionID != "" && !sessionPattern.MatchString(req.SessionID) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidSessionID, req.SessionID)
	}
	if strings.TrimSpace(req.Task) == "" {
		return nil, errors.New("opencode: the task is empty")
	}
	if req.Model != "" {
		// OpenCode splits the model at the first "/" into provider and
		// model; without one it fails later with a less helpful message.
		provider, model, ok := strings.Cut(req.Model, "/")
		if !ok || provider == "" || model == "" {
			return nil, fmt.Errorf("opencode: model %q is not of the form provider/model", req.Model)
		}
	}
	argv := []string{b.cfg.Binary, "run", "--format", "json"}
	if b.cfg.PermissionFlag != "none" {
		argv = append(argv, b.cfg.PermissionFlag)
	}
	if req.Model != "" {
		argv = append(argv, "--model="+req.Model)
	}
	if req.SessionID != "" {
		argv = append(argv, "--session="+req.SessionID)
	}
	return append(argv, "--", req.Task), nil
}

// NewParser returns a parser for one run's stdout.
func (b *Backend) NewParser(req backend.Request) backend.Parser {
	return newParser(req)
}
