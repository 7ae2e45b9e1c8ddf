// Package mesh is the executor of roles via mesh: it runs a node's task
// with mesh-exec's mesh_execute tool, over streamable HTTP (or the stdio of a
// mesh-exec child), and continues the role's agent session across nodes.
//
// Every call asks for progress; mesh-exec names the agent's session in the
// _meta of the progress notification of the agent's init event (key
// "meshwork/session_id"), and the executor hands it to
// [executor.Request.OnSession] at once, so the engine can save it before the
// node ends and resume the same session after a crash.
package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mcpconn"
)

// ToolName is mesh-exec's tool.
const ToolName = meshapi.ToolMeshExecute

// timeoutMargin is how much longer than mesh_execute's own timeout the
// executor waits for its result: mesh-exec stops the agent at the timeout
// (SIGTERM, a grace period, SIGKILL) and still returns the partial output.
const timeoutMargin = 30 * time.Second

// Config is where the executor finds mesh-exec: Endpoint with Token (its
// MESH_EXEC_TOKEN), or Command, the argv of `mesh-exec serve --transport
// stdio ...`, run as a child that starts on the first call.
type Config = mcpconn.Server

// Executor runs nodes with mesh_execute. It keeps one MCP session to
// mesh-exec, opened on the first call. It is safe for concurrent use.
type Executor struct {
	conn *mcpconn.Conn

	progress executor.Progress
}

var _ executor.Executor = (*Executor)(nil)

// New checks cfg and returns an Executor; it connects on the first call.
func New(cfg Config) (*Executor, error) {
	if cfg.Endpoint != "" && cfg.Token == "" {
		return nil, errors.New("mesh executor: Token is required with Endpoint (mesh-exec requires a bearer token)")
	}
	e := &Executor{}
	var err error
	if e.conn, err = mcpconn.NewWithProgress(cfg, e.progress.Handle); err != nil {
		return nil, fmt.Errorf("mesh executor: %w", err)
	}
	return e, nil
}

// Close ends the session with mesh-exec (and stops a Command child).
func (e *Executor) Close() error { return e.conn.Close() }

// Execute runs one attempt with mesh_execute. A failure the agent reported
// (is_error) returns the partial output, the session and the cost together
// with an error holding mesh-exec's message.
func (e *Executor) Execute(ctx context.Context, req executor.Request) (executor.Result, error) {
	in := meshapi.MeshExecuteIn{Repository: req.Role.Repository, Task: req.Task, SessionID: req.SessionID, ForkSession: req.ForkSession && req.SessionID != ""}
	// mesh_execute has no per-call system prompt (mesh-exec takes one for
	// all its runs, --append-system-prompt), so the role's prompt opens the
	// first task of a session instead; the agent keeps it in its context
	// for the rest of the session, so a resume does not repeat it.
	if req.SessionID == "" && strings.TrimSpace(req.Role.SystemPromptText) != "" {
		in.Task = strings.TrimSpace(req.Role.SystemPromptText) + "\n\n" + req.Task
	}
	// req.Role.Model is not passed: mesh_execute has no per-call model
	// either; the model is mesh-exec's (--model).
	timeout := req.Timeout
	if timeout <= 0 && req.Role.Timeout > 0 {
		timeout = time.Duration(req.Role.Timeout) * time.Millisecond
	}
	if timeout > 0 {
		in.Timeout = max(timeout.Milliseconds(), 1)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+timeoutMargin)
		defer cancel()
	}

	c := &call{onSession: req.OnSession}
	token, finish := e.progress.Start(func(p *mcp.ProgressNotificationParams) {
		if id, _ := p.GetMeta()[meshapi.SessionMetaKey].(string); id != "" {
			c.report(id)
		}
		if ev, ok := executor.AgentEvent(p); ok && req.OnEvent != nil {
			req.OnEvent(ev)
		}
	})
	var resultMeta map[string]any
	defer func() {
		finish(resultMeta)
		c.finish()
	}()

	params := &mcp.CallToolParams{Name: ToolName, Arguments: in}
	params.SetProgressToken(token)
	log := e.conn.Logger().With(slog.String("run", req.RunID), slog.String("node", req.NodeID), slog.String("role", req.RoleName))
	log.DebugContext(ctx, "calling mesh_execute", slog.Bool("resume", req.SessionID != ""), slog.Int64("timeout_ms", in.Timeout))
	// Never made twice, even when mesh-exec restarts during the call
	// (mcpconn.ErrSessionLost): the agent may have run, and the engine's
	// retry policy decides.
	res, err := e.conn.CallTool(ctx, params)
	if res != nil {
		resultMeta = res.Meta
	}
	if err != nil {
		// The session may have been reported before the call broke.
		return executor.Result{SessionID: c.sessionID()}, fmt.Errorf("mesh_execute: %w", err)
	}

	var out meshapi.MeshExecuteOut
	structured := res.StructuredContent != nil
	if structured {
		raw, err := json.Marshal(res.StructuredContent)
		if err == nil {
			err = json.Unmarshal(raw, &out)
		}
		if err != nil {
			return executor.Result{SessionID: c.sessionID()}, fmt.Errorf("mesh_execute: decoding the result: %w", err)
		}
	}
	if out.SessionID == "" {
		out.SessionID = c.sessionID()
	}
	c.report(out.SessionID)
	result := executor.Result{Output: out.Output, SessionID: out.SessionID, CostUSD: out.Metadata.CostUSD}
	if res.IsError || out.Metadata.IsError {
		msg := meshapi.ResultText(res)
		if msg == "" {
			msg = out.Output
		}
		if msg == "" {
			msg = "the agent failed without a message"
		}
		log.InfoContext(ctx, "mesh_execute failed", slog.String("session", out.SessionID), slog.String("error", msg))
		if e, ok := meshapi.ErrorOf(res); ok && e.Code == meshapi.CodeInvalidArgument {
			// The request itself (a task past its size limit, a session
			// of another repository, a repository that is not one).
			return result, executor.Refused(fmt.Errorf("mesh_execute: %w", e))
		}
		return result, fmt.Errorf("mesh_execute: %s", msg)
	}
	if !structured {
		return result, errors.New("mesh_execute: the result has no structured content")
	}
	log.DebugContext(ctx, "mesh_execute done", slog.String("session", out.SessionID), slog.Float64("cost_usd", out.Metadata.CostUSD))
	return result, nil
}

// text is a tool result's first text content.

// call is one in-flight mesh_execute.
type call struct {
	onSession func(string)

	mu       sync.Mutex
	session  string
	reported bool
	done     bool
}

// report hands a session id to OnSession once per id, and never after the
// call returned (a late notification).
func (c *call) report(id string) {
	if id == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || (c.reported && c.session == id) {
		return
	}
	c.session, c.reported = id, true
	if c.onSession != nil {
		// Under the lock, so that it never runs after Execute returned.
		c.onSession(id)
	}
}

func (c *call) sessionID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

func (c *call) finish() {
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}
