// Package server is mesh-exec's MCP server: the mesh_execute tool, which runs
// a task with a coding-agent CLI in a repository under the workspace root and
// resumes the agent's session across calls.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/wsquota"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/runner"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/session"
)

// Busy policies: what a call on a session that is already running does.
const (
	BusyWait   = "wait"   // wait for the running call to finish (default)
	BusyRefuse = "refuse" // fail at once with a clear error
)

// Config configures a Server.
type Config struct {
	// WorkspaceRoot bounds repositories: one that resolves outside it,
	// symbolic links followed, is refused. Required.
	WorkspaceRoot string
	// Backends by name; DefaultBackend starts new sessions. Required.
	Backends       map[string]backend.Backend
	DefaultBackend string
	// Sessions remembers sessions. Required.
	Sessions *session.Store
	// Runner runs the agent processes. Required.
	Runner *runner.Runner
	// Settings are the agent settings of every run. Defaults to none; with
	// no HookSettings, tool calls are not checked (package agenthook makes
	// them).
	backend.Settings
	// Busy is BusyWait or BusyRefuse. Defaults to BusyWait.
	Busy string
	// MaxTaskBytes bounds a task. Defaults to 1 MiB.
	MaxTaskBytes int
	// Quota, when set, bounds the workspace: a run is refused while it is
	// over, and stopped when it passes it. Defaults to none.
	Quota *wsquota.Quota
	// DefaultTimeout applies when a call gives none. Defaults to 10m.
	DefaultTimeout time.Duration
	// MaxTimeout caps any call's timeout. Defaults to 1h.
	MaxTimeout time.Duration
	// Heartbeat is the longest gap between progress notifications. Defaults to 10s.
	Heartbeat time.Duration
	// Logger receives operational logs. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics receives the agent run metrics (meshwork_agent_*, labelled by
	// backend). Defaults to none: they are counted but not exposed.
	Metrics prometheus.Registerer
}

// Server serves mesh_execute.
type Server struct {
	cfg     Config
	logger  *slog.Logger
	metrics *metrics
	root    string // WorkspaceRoot, symbolic links resolved

	mu    sync.Mutex
	busy  map[string]chan struct{} // session id -> held while a run uses it
	runs  sync.WaitGroup
	base  context.Context //nolint:containedctx // the server's lifetime: Shutdown ends every run through it
	close context.CancelFunc
}

// New checks cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.WorkspaceRoot == "" || cfg.Sessions == nil || cfg.Runner == nil || len(cfg.Backends) == 0 {
		return nil, errors.New("server: WorkspaceRoot, Backends, Sessions and Runner are required")
	}
	if cfg.Backends[cfg.DefaultBackend] == nil {
		return nil, fmt.Errorf("server: default backend %q is not configured", cfg.DefaultBackend)
	}
	root, err := filepath.EvalSymlinks(cfg.WorkspaceRoot)
	if err != nil {
		return nil, fmt.Errorf("workspace root: %w", err)
	}
	if cfg.Busy == "" {
		cfg.Busy = BusyWait
	}
	if cfg.Busy != BusyWait && cfg.Busy != BusyRefuse {
		return nil, fmt.Errorf("busy policy %q is not one of wait, refuse", cfg.Busy)
	}
	if cfg.MaxTaskBytes <= 0 {
		cfg.MaxTaskBytes = 1 << 20
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 10 * time.Minute
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = time.Hour
	}
	// The cap holds for the default too.
	cfg.DefaultTimeout = min(cfg.DefaultTimeout, cfg.MaxTimeout)
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Metrics, slices.Collect(maps.Keys(cfg.Backends)))
	if err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, logger: logger, metrics: m, root: root, busy: map[string]chan struct{}{}, base: base, close: cancel}, nil
}

// Shutdown stops every running agent (their whole process groups) and waits
// for them: mesh-exec never exits with agents still running.
func (s *Server) Shutdown() {
	s.close()
	s.runs.Wait()
}

// StopRuns stops every running agent without waiting; their calls then
// return error results. It is for the end of a stdio client's input, where
// the MCP server waits for in-flight calls before it returns, and for the
// shutdown of the HTTP server, which waits for them too.
func (s *Server) StopRuns() { s.close() }

// MCP returns the MCP server with the mesh_execute tool. Each request gets
// a server span that continues the client's trace (params._meta), whatever
// the transport: over stdio, inside an agent container with no network,
// nothing is exported, but the logs still carry the caller's trace id.
func (s *Server) MCP() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mesh-exec", Version: buildinfo.Version}, &mcp.ServerOptions{Logger: s.logger})
	// HTTPParent runs first: over HTTP, a request's span is that of its
	// own HTTP request (telemetry.HTTPTraceHeader) unless params._meta
	// carries the client's trace context.
	srv.AddReceivingMiddleware(telemetry.HTTPParent(), telemetry.ServerMiddleware(), meshapi.ErrorMiddleware())
	mcp.AddTool(srv, &mcp.Tool{
		Name: meshapi.ToolMeshExecute,
		Description: "Run a task with a coding agent in a repository under the workspace root. " +
			"Pass the returned session_id to continue the same agent session; a resume always runs in the session's repository.",
	}, s.execute)
	return srv
}

// ExecuteIn is mesh_execute's input (the wire type, shared with its
// clients).
type ExecuteIn = meshapi.MeshExecuteIn

// ExecuteOut is mesh_execute's output.
type ExecuteOut = meshapi.MeshExecuteOut

// Metadata describes a run.
type Metadata = meshapi.MeshExecuteMetadata

// fail is an ordinary failure. Returned as an error, the SDK makes it a tool
// result with isError and the message, without an empty structured result
// that would contradict it.
func fail(code meshapi.Code, format string, args ...any) (*mcp.CallToolResult, ExecuteOut, error) {
	return nil, ExecuteOut{}, meshapi.Errorf(code, format, args...)
}

func (s *Server) execute(ctx context.Context, req *mcp.CallToolRequest, in ExecuteIn) (*mcp.CallToolResult, ExecuteOut, error) {
	if strings.TrimSpace(in.Task) == "" {
		return fail(meshapi.CodeInvalidArgument, "task is required")
	}
	if len(in.Task) > s.cfg.MaxTaskBytes {
		return fail(meshapi.CodeInvalidArgument, "task is %d bytes; the limit is %d: put large inputs in a file in the repository and refer to it", len(in.Task), s.cfg.MaxTaskBytes)
	}
	if in.Timeout < 0 {
		return fail(meshapi.CodeInvalidArgument, "timeout must not be negative (milliseconds)")
	}
	timeout := s.cfg.DefaultTimeout
	if in.Timeout > 0 {
		// Compared in milliseconds first: a huge timeout would overflow
		// the Duration (and time out at once).
		timeout = s.cfg.MaxTimeout
		if in.Timeout < s.cfg.MaxTimeout.Milliseconds() {
			timeout = time.Duration(in.Timeout) * time.Millisecond
		}
	}

	name := s.cfg.DefaultBackend
	var repo string
	if in.SessionID != "" {
		sess, err := s.cfg.Sessions.Get(in.SessionID)
		if errors.Is(err, session.ErrNotFound) {
			return fail(meshapi.CodeNotFound, "unknown session_id %q: mesh-exec has no such session; call without session_id to start one", in.SessionID)
		}
		if err != nil {
			return nil, ExecuteOut{}, err
		}
		if in.Repository != "" {
			if r, err := s.resolve(in.Repository); err != nil || r != sess.Repository {
				return fail(meshapi.CodeInvalidArgument, "session %s belongs to repository %s; a resume always runs there (omit repository or pass that one)", sess.ID, sess.Repository)
			}
		}
		// The session's repository is checked again as a new call's is:
		// a link put on its way since, or a session file written by
		// someone other than mesh-exec, must not take the agent out of
		// the workspace root.
		if r, err := s.resolve(sess.Repository); err != nil || r != sess.Repository {
			return fail(meshapi.CodeInvalidArgument, "session %s's repository %s is no longer inside the workspace root %s as it was: start a new session", sess.ID, sess.Repository, s.cfg.WorkspaceRoot)
		}
		name, repo = sess.Backend, sess.Repository
		if s.cfg.Backends[name] == nil {
			return fail(meshapi.CodeUnavailable, "session %s was started with backend %s, which this mesh-exec does not have", sess.ID, name)
		}
	} else {
		var err error
		if repo, err = s.resolve(in.Repository); err != nil {
			return fail(meshapi.CodeInvalidArgument, "%v", err)
		}
	}
	b := s.cfg.Backends[name]
	if in.ForkSession {
		if in.SessionID == "" {
			return fail(meshapi.CodeInvalidArgument, "fork_session needs the session_id of the session to fork")
		}
		if f, ok := b.(backend.Forker); !ok || !f.Forks() {
			return fail(meshapi.CodeInvalidArgument, "backend %s cannot fork a session; resume it (without fork_session) or start a new one", name)
		}
	}

	if in.SessionID != "" {
		release, err := s.acquire(ctx, in.SessionID)
		if err != nil {
			return fail(meshapi.CodeConflict, "%v", err)
		}
		defer release()
	}

	if q := s.cfg.Quota; q != nil {
		// Measured afresh: runs are long and rare, and nothing tells us
		// when files go.
		msg, err := q.Remeasure()
		if err != nil {
			return fail(meshapi.CodeInternal, "%v", err)
		}
		if msg != "" {
			return fail(meshapi.CodeResourceExhausted, "mesh_execute refused: %s; take the work out (workspace_diff, export_workspace) and start a fresh journey", msg)
		}
		defer q.Invalidate()
	}

	// The run ends with the request (client cancellation), its timeout,
	// the server's shutdown or the workspace passing its quota, whichever
	// comes first.
	quotaCtx, stopForQuota := context.WithCancelCause(ctx)
	defer stopForQuota(nil)
	runCtx, cancel := context.WithTimeout(quotaCtx, timeout)
	defer cancel()
	if q := s.cfg.Quota; q != nil && q.Enabled() {
		stopWatch, watched := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(watched)
			q.Watch(quotaInterval, stopWatch, func(reason string) { stopForQuota(errOverQuota{reason}) })
		}()
		defer func() { close(stopWatch); <-watched }()
	}
	stopOnShutdown := context.AfterFunc(s.base, cancel)
	defer stopOnShutdown()
	s.runs.Add(1)
	defer s.runs.Done()

	prog := newProgress(ctx, req, s.cfg.Heartbeat)
	defer prog.stop()
	breq := backend.Request{
		Repository: repo, Task: in.Task, SessionID: in.SessionID, ForkSession: in.ForkSession, Settings: s.cfg.Settings,
	}
	recorded := ""
	started := time.Now()
	s.metrics.active.WithLabelValues(name).Inc()
	ctx, span := startAgentSpan(ctx, name, s.cfg.Model, in.SessionID)
	// A session this run starts (or forks) is busy as soon as it is
	// named, as a resumed one is: its id reaches the client in this
	// call's progress, and a second call naming it must wait for this one.
	var held []func()
	defer func() {
		for _, release := range held {
			release()
		}
	}()
	onEvent := func(ev backend.Event) {
		if ev.SessionID != "" && ev.SessionID != in.SessionID && ev.SessionID != recorded {
			if release, _ := s.take(ev.SessionID); release != nil {
				held = append(held, release)
			}
		}
		// Save the session the moment the agent names it, so a crash
		// mid-run can still resume it.
		if ev.SessionID != "" && ev.SessionID != recorded {
			if _, err := s.cfg.Sessions.Record(ev.SessionID, name, repo, time.Now()); err != nil {
				s.logger.WarnContext(ctx, "recording session failed", slog.Any("error", err))
			} else {
				recorded = ev.SessionID
			}
		}
		if ev.Kind == backend.KindToolUse {
			s.metrics.toolUses.WithLabelValues(name).Inc()
		}
		span.event(ev)
		prog.event(ev)
	}
	res, out, err := s.cfg.Runner.Run(runCtx, b, breq, onEvent)
	var over errOverQuota
	if errors.As(context.Cause(quotaCtx), &over) && err == nil {
		res.IsError = true
		res.Output = "the agent was stopped: " + over.reason + "\n" + res.Output
	}
	s.observe(name, span, started, res, out, err)
	if errors.Is(err, runner.ErrBinaryNotFound) {
		return fail(meshapi.CodeUnavailable, "%v", err)
	}
	if errors.Is(err, backend.ErrRequestRefused) {
		return fail(meshapi.CodeInvalidArgument, "%v", err)
	}
	if err != nil {
		s.logger.ErrorContext(ctx, "agent run failed", slog.String("backend", name), slog.Any("error", err))
		return fail(meshapi.CodeInternal, "running the agent failed: %v", err)
	}
	if res.SessionID != "" && res.SessionID != recorded {
		if _, err := s.cfg.Sessions.Record(res.SessionID, name, repo, time.Now()); err != nil {
			s.logger.WarnContext(ctx, "recording session failed", slog.Any("error", err))
		}
	}
	result := ExecuteOut{SessionID: res.SessionID, Output: res.Output, Metadata: Metadata{
		Backend: name, IsError: res.IsError, CostUSD: res.CostUSD, DurationMS: res.DurationMS, NumTurns: res.NumTurns,
		InputTokens: res.InputTokens, OutputTokens: res.OutputTokens,
		ToolsUsed: nonNil(res.ToolsUsed), FilesModified: nonNil(res.FilesModified), ExitCode: out.ExitCode,
		ToolCalls: res.ToolDecisions,
	}}
	s.logger.InfoContext(ctx, "agent run finished", slog.String("backend", name), slog.String("session", res.SessionID),
		slog.Bool("is_error", res.IsError), slog.Int64("duration_ms", res.DurationMS), slog.String("stopped", out.Stopped),
		slog.Int("skipped_lines", out.SkippedLines))
	prog.stop() // no heartbeat after the count below
	if res.IsError {
		// The structured result still carries the session and the partial
		// output, so a client can resume or report.
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: res.Output}}, Meta: prog.meta()}, result, nil
	}
	return &mcp.CallToolResult{Meta: prog.meta()}, result, nil
}

// quotaInterval is how often the workspace is measured while an agent runs.
const quotaInterval = time.Second

// errOverQuota is why a run was stopped for the workspace quota.
type errOverQuota struct{ reason string }

func (e errOverQuota) Error() string { return e.reason }

// observe ends a run's span and counts it.
func (s *Server) observe(name string, span *agentSpan, started time.Time, res backend.Result, out runner.Outcome, err error) {
	s.metrics.active.WithLabelValues(name).Dec()
	errorType := failureType(res, out, err)
	s.metrics.agent.Observe(telemetry.AgentRun{
		Backend: name, OK: errorType == "", CostUSD: res.CostUSD, InputTokens: res.InputTokens, OutputTokens: res.OutputTokens,
		Turns: int64(res.NumTurns), Duration: time.Since(started),
	})
	span.finish(res, errorType, err)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// acquire takes a session for one run, waiting or refusing per the policy.
func (s *Server) acquire(ctx context.Context, id string) (func(), error) {
	for {
		release, held := s.take(id)
		if release != nil {
			return release, nil
		}
		if s.cfg.Busy == BusyRefuse {
			return nil, fmt.Errorf("session %s is busy with another run; mesh-exec runs one task per session at a time (retry when it finishes)", id)
		}
		select {
		case <-held:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for session %s: %w", id, ctx.Err())
		}
	}
}

// take marks session id busy and returns its release, or, when another
// run holds it, nil and the channel closed when that run ends.
func (s *Server) take(id string) (release func(), held <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, busy := s.busy[id]; busy {
		return nil, held
	}
	done := make(chan struct{})
	s.busy[id] = done
	return func() {
		s.mu.Lock()
		delete(s.busy, id)
		s.mu.Unlock()
		close(done)
	}, nil
}

// resolve turns a requested repository into an existing directory inside the
// workspace root, creating it when it is missing but would be inside.
func (s *Server) resolve(p string) (string, error) {
	if strings.TrimSpace(p) == "" {
		return "", errors.New("repository is required")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("repository contains a NUL byte")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.root, p)
	}
	p = filepath.Clean(p)
	outside := fmt.Errorf("repository %s is outside the workspace root %s", p, s.cfg.WorkspaceRoot)
	// Resolve the deepest existing ancestor, so a symbolic link anywhere on
	// the way is followed before the containment check.
	existing, rest := p, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return "", outside
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("repository %s: %w", p, err)
	}
	real = filepath.Join(real, rest)
	if rel, err := filepath.Rel(s.root, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", outside
	}
	if err := os.MkdirAll(real, 0o755); err != nil {
		return "", fmt.Errorf("creating repository %s: %w", p, err)
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return "", fmt.Errorf("repository %s is not a directory", p)
	}
	return real, nil
}
