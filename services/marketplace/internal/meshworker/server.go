package meshworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/proctree"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/wsquota"
)

// Defaults of [Config], also the flag defaults of "meshworker serve".
const (
	DefaultRoot        = "/workspace"
	DefaultMaxFileSize = 10_000_000
	DefaultExecTimeout = 60 * time.Second
	DefaultMaxOutput   = 1_000_000
)

// Config configures the tools of one server.
type Config struct {
	// Root is the workspace directory every path is relative to.
	// Defaults to /workspace.
	Root string
	// MaxFileSize is the largest file read, written, searched or diffed, in
	// bytes. Defaults to 10,000,000.
	MaxFileSize int64
	// Readonly refuses write, delete, git_init, git_add and git_commit. Defaults to false.
	Readonly bool
	// AllowExec enables the exec tool; without it exec is refused. Defaults
	// to false.
	AllowExec bool
	// ExecTimeout is the longest a command may run, and the cap on the
	// timeout a caller asks for. Defaults to 60 s.
	ExecTimeout time.Duration
	// MaxOutput caps each of a command's stdout and stderr, in bytes; the
	// rest is discarded. Defaults to 1,000,000.
	MaxOutput int64
	// AllowedPaths are globs as in a definition's constraints.allowed_paths:
	// when there are any, a path must match one both as asked and as it
	// resolves after following symbolic links, and list and search leave
	// out the entries that do not. Defaults to none: every path.
	AllowedPaths []string
	// DeniedPaths are globs as in constraints.denied_paths: a path matching
	// one, as asked or as it resolves after following symbolic links, is
	// refused, and list and search leave it out. Defaults to none.
	DeniedPaths []string
	// ExecEnv are "NAME=value" entries every command gets besides PATH and
	// HOME=/tmp, such as ToolchainEnv's. A GOTMPDIR among them is created
	// before each command: Go needs it to exist, and a worker image points
	// it into the workspace, which starts empty. Defaults to none.
	ExecEnv []string
	// SearchTimeout is the longest a search runs; past it the search stops
	// and returns what it found, flagged. Defaults to 10 s.
	SearchTimeout time.Duration
	// MaxWorkspaceBytes and MaxWorkspaceFiles are the workspace quota (see
	// quota.go); negative is no limit. Default to 2 GiB and 200,000.
	MaxWorkspaceBytes int64
	MaxWorkspaceFiles int64
	// Sweeper, when set, ends what each command leaves running once it
	// returns (meshworker serve sets it; see package proctree). Without
	// it only the command's process group is killed.
	Sweeper *proctree.Sweeper
}

func (c Config) withDefaults() Config {
	if c.Root == "" {
		c.Root = DefaultRoot
	}
	if c.MaxFileSize <= 0 {
		c.MaxFileSize = DefaultMaxFileSize
	}
	if c.ExecTimeout <= 0 {
		c.ExecTimeout = DefaultExecTimeout
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.SearchTimeout <= 0 {
		c.SearchTimeout = DefaultSearchTimeout
	}
	if c.MaxWorkspaceBytes == 0 {
		c.MaxWorkspaceBytes = DefaultMaxWorkspaceBytes
	}
	if c.MaxWorkspaceFiles == 0 {
		c.MaxWorkspaceFiles = DefaultMaxWorkspaceFiles
	}
	return c
}

// MaxLineLength is the longest JSON-RPC message the server's transport
// should accept: a write of a file at the size limit, escaped as JSON (up to
// six bytes for one, as in \u0001), with room for the rest of the message.
func (c Config) MaxLineLength() int {
	return max(mcp.DefaultMaxLineLength, int(6*c.withDefaults().MaxFileSize)+(1<<20))
}

// errReadonly refuses every change to a read-only workspace.
var errReadonly = errors.New("the workspace is read-only: this worker may not change files")

// countLimit is the cap a tool applies to what it returns, from the request's
// field (named for the error): zero, as when the field is left out, means
// def, and a negative value is refused rather than read as no cap at all.
func countLimit(field string, n, def int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("%s must not be negative", field)
	case n == 0:
		return def, nil
	}
	return n, nil
}

// worker holds what the tools share: the confined workspace and the limits.
type worker struct {
	cfg     Config
	absRoot string // for the exec working directory and go-git
	// realRoot is absRoot with its symbolic links resolved.
	realRoot string
	root     *os.Root    // every file access goes through it
	policy   *pathPolicy // nil without path globs
	quota    *wsquota.Quota
	logger   *slog.Logger
	// gitMu serialises the git tools: go-git does not lock the index
	// against a concurrent writer in the same process.
	gitMu sync.Mutex
}

// NewServer opens the workspace root and returns an MCP server named
// "meshworker" with every tool registered. The root stays open for the
// server's lifetime, which is the process's.
func NewServer(cfg Config, logger *slog.Logger) (*mcp.Server, error) {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	policy, err := newPathPolicy(cfg.AllowedPaths, cfg.DeniedPaths)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("resolving the workspace root: %w", err)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("opening the workspace root: %w", err)
	}
	// The kernel names opened files by their real path: checkOpened
	// compares with the root's.
	realRoot, err := filepath.EvalSymlinks(abs)
	if err != nil {
		realRoot = abs
	}
	w := &worker{cfg: cfg, absRoot: abs, realRoot: realRoot, root: root, policy: policy, logger: logger}
	w.quota = wsquota.New(abs, cfg.MaxWorkspaceBytes, cfg.MaxWorkspaceFiles)

	s := mcp.NewServer(&mcp.Implementation{Name: "meshworker", Version: buildinfo.Version}, &mcp.ServerOptions{
		Logger:       logger,
		Instructions: "Tools on one workspace directory. Paths are relative to the workspace root and cannot leave it.",
	})
	// A tool call continues the trace the marketplace sent in params._meta,
	// so the tool's log lines carry the action's trace id.
	s.AddReceivingMiddleware(telemetry.ServerMiddleware())
	addTool(s, w, "read", "Read a text file of the workspace.", w.read)
	addTool(s, w, "write", "Write a file, creating parent directories; the file is replaced atomically.", w.write)
	addTool(s, w, "list", "List a directory, sorted by path; symbolic links are listed, not followed.", w.list)
	addTool(s, w, "search", "Search text files for an RE2 regular expression, line by line.", w.search)
	addTool(s, w, "delete", "Delete a file, a symbolic link or (with recursive) a directory.", w.delete)
	addTool(s, w, "exec", "Run a command (argv, no shell) in the workspace; a non-zero exit code is a normal result.", w.exec)
	addTool(s, w, "git_status", "Show the branch and the changed files of the workspace's git repository.", w.gitStatus)
	addTool(s, w, "git_diff", "Unified diff of the working tree against HEAD, optionally for one path.", w.gitDiff)
	addTool(s, w, "git_log", "List the latest commits reachable from HEAD.", w.gitLog)
	addTool(s, w, "git_add", "Stage paths (files or directories, deletions included).", w.gitAdd)
	addTool(s, w, "git_commit", "Commit the staged changes.", w.gitCommit)
	addTool(s, w, "git_init", "Make the workspace a git repository (idempotent).", w.gitInit)
	return s, nil
}

// addTool registers h with input and output schemas from its types. A
// returned error becomes a tool result with isError; a panic is caught and
// reported the same way, so one bad call never takes the server down.
func addTool[In, Out any](s *mcp.Server, w *worker, name, description string, h func(context.Context, In) (Out, error)) {
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: description},
		func(ctx context.Context, _ *mcp.CallToolRequest, in In) (_ *mcp.CallToolResult, out Out, err error) {
			start := time.Now()
			defer func() {
				if r := recover(); r != nil {
					var zero Out
					out, err = zero, fmt.Errorf("%s failed with an internal error: %v", name, r)
					w.logger.ErrorContext(ctx, "tool panicked", slog.String("tool", name), slog.Any("panic", r))
				}
				attrs := []slog.Attr{slog.String("tool", name), slog.Duration("duration", time.Since(start))}
				level := slog.LevelInfo
				if err != nil {
					level = slog.LevelWarn
					attrs = append(attrs, slog.String("error", err.Error()))
				}
				w.logger.LogAttrs(ctx, level, "tool call", attrs...)
			}()
			out, err = h(ctx, in)
			return nil, out, err
		})
}
