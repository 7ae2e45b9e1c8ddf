// Package marketplace is the executor of roles via marketplace: it runs a
// node's task as a task action of a marketplace worker, in a journey of its
// own per thread, role and worker (and per item of a foreach node), over the
// marketplace's MCP tools (spawn_worker, get_worker_state,
// execute_in_worker) on streamable HTTP.
//
// The journey, not the request, carries the agent session: the marketplace
// stores the session of each journey and resumes it on the next action, so
// runs on one thread continue the role's conversation and workspace.
package marketplace

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mcpconn"
)

// Config is where the executor finds the marketplace: Endpoint (such as
// http://127.0.0.1:8080/mcp) and Token, the orchestrator's bearer token
// there, whose caller owns the journeys. Both are required; a Command is
// refused.
type Config = mcpconn.Server

// Executor runs nodes in marketplace workers. It keeps one MCP session to
// the marketplace, opened on the first call, and spawns each journey once
// per process. It is safe for concurrent use.
type Executor struct {
	conn *mcpconn.Conn

	mu       sync.Mutex
	journeys map[string]*journey // by journey id

	progress executor.Progress
}

// journey is what the executor knows of one journey.
type journey struct {
	mu      sync.Mutex // held while spawning
	spawned bool       // spawned (or found active) by this process
}

var (
	_ executor.Executor = (*Executor)(nil)
	_ executor.Releaser = (*Executor)(nil)
)

// New checks cfg and returns an Executor; it connects on the first call.
func New(cfg Config) (*Executor, error) {
	if err := cfg.CheckHTTP(); err != nil {
		return nil, fmt.Errorf("marketplace executor: %w", err)
	}
	e := &Executor{journeys: map[string]*journey{}}
	var err error
	if e.conn, err = mcpconn.NewWithProgress(cfg, e.progress.Handle); err != nil {
		return nil, fmt.Errorf("marketplace executor: %w", err)
	}
	return e, nil
}

// Close ends the session with the marketplace. Journeys keep running: the
// next process finds them active.
func (e *Executor) Close() error { return e.conn.Close() }

// journeyHashLen is how many hex digits of a SHA-256 a journey id keeps:
// 96 bits, so that no two keys meet by chance.
const journeyHashLen = 24

// JourneyID is the journey of a role's worker on a thread, or of one item
// of a foreach node (item "<node id>/<index>", empty for a node):
// "<role>-<the first 24 hex digits of the SHA-256 of thread, worker and
// item>". Every run of the thread finds the same worker, workspace and agent
// session; another worker of the same role name, or another item, has a
// journey of its own; and the id's length is bounded however long the
// thread, worker or item (at most 89 characters with a role name of 64).
// Role names (^[a-z][a-z0-9_]{0,63}$) make it a valid journey id (1 to 128
// letters, digits, '.', '_' or '-'); JourneyID reports an error for
// anything else.
func JourneyID(role, worker, thread, item string) (string, error) {
	h := sha256.New()
	for _, part := range []string{thread, worker, item} {
		// Length-prefixed, so that no two keys make the same bytes.
		_, _ = fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	id := role + "-" + hex.EncodeToString(h.Sum(nil))[:journeyHashLen]
	if !meshapi.ValidID(id) {
		return "", fmt.Errorf("role %q makes journey id %q, which the marketplace does not accept (1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit)", role, id)
	}
	return id, nil
}

// RefusedError is an action the worker's constraint gate refused: it never
// ran. Running it again is refused again, unless the worker's limits
// changed.
type RefusedError struct {
	// Tool is the marketplace tool that refused: execute_in_worker (the
	// constraint gate) or workspace_diff (the result gate).
	Tool string
	// Message is the marketplace's, listing every violation.
	Message    string
	Violations []meshtype.Violation
}

func (e *RefusedError) Error() string { return e.Tool + " refused: " + e.Message }

// Unwrap makes the constraint gate's refusal an executor.ErrRefused: the
// same action is refused again, so the engine does not retry it. The
// result gate's refusal stays a failure the engine may retry: the next
// attempt runs the task again and may change something else.
func (e *RefusedError) Unwrap() error {
	if e.Tool == meshapi.ToolExecuteInWorker {
		return executor.ErrRefused
	}
	return nil
}

// executeOut is execute_in_worker's result.
type executeOut struct {
	Executed   bool                 `json:"executed"`
	Output     json.RawMessage      `json:"output"`
	SessionID  string               `json:"session_id"`
	Violations []meshtype.Violation `json:"violations"`
	Message    string               `json:"message"`
}

// agentOutput is the output of a task run by an agent worker: what
// mesh_execute returned.
type agentOutput struct {
	SessionID *string `json:"session_id"`
	Output    *string `json:"output"`
	Metadata  struct {
		CostUSD float64 `json:"cost_usd"`
	} `json:"metadata"`
}

// Execute runs one attempt as a task action in the journey of the request's
// thread, role and worker (and item), spawning the worker first if this
// process has not. req.SessionID is not used: the journey resumes its own
// agent session. A foreach item (req.Item) has a journey of its own, apart
// from the role's, which the same item of a later run on the thread
// continues.
func (e *Executor) Execute(ctx context.Context, req executor.Request) (executor.Result, error) {
	if req.Role.Worker == "" {
		return executor.Result{}, fmt.Errorf("role %q names no marketplace worker", req.RoleName)
	}
	thread := req.Thread
	if thread == "" {
		thread = req.RunID // a run without a thread is its own thread
	}
	var repo map[string]any
	if req.Source != nil {
		repo = req.Source.Repository
	}
	id, err := JourneyID(req.RoleName, seededWorker(req.Role.Worker, repo), thread, req.Item)
	if err != nil {
		return executor.Result{}, err
	}
	log := e.conn.Logger().With(slog.String("run", req.RunID), slog.String("node", req.NodeID), slog.String("journey", id))
	if req.Item != "" {
		log = log.With(slog.String("item", req.Item))
	}
	spawn, err := spawnSource(req, thread)
	if err != nil {
		return executor.Result{}, err
	}
	j := e.journey(id)
	if spawn.fresh {
		// Seeded afresh from another journey's base plus its patch, for
		// every attempt: the node sees exactly the change it is given.
		j.mu.Lock()
		j.spawned = false
		j.mu.Unlock()
	}
	if err := e.ensure(ctx, log, j, id, req.Role.Worker, spawn, req.OnWorker); err != nil {
		return executor.Result{}, err
	}
	act := map[string]any{"type": "task", "task": req.Task}
	if len(req.Command) > 0 {
		act = map[string]any{"type": "exec", "command": req.Command}
	}
	out, err := e.execute(ctx, id, act, req.OnEvent)
	if errors.Is(err, errNotLive) {
		// Stopped or orphaned since it was spawned (the marketplace
		// restarted, say): the action never ran, so resume the journey and
		// run it once more.
		log.InfoContext(ctx, "journey is not live; resuming it", slog.Any("error", err))
		j.mu.Lock()
		j.spawned = false
		j.mu.Unlock()
		if err := e.ensure(ctx, log, j, id, req.Role.Worker, spawn, req.OnWorker); err != nil {
			return executor.Result{}, err
		}
		out, err = e.execute(ctx, id, act, req.OnEvent)
	}
	if err != nil {
		var refused *RefusedError
		if !errors.As(err, &refused) {
			// Maybe the worker is gone: check again before the next attempt.
			j.mu.Lock()
			j.spawned = false
			j.mu.Unlock()
		}
		return executor.Result{}, err
	}

	res := executor.Result{SessionID: out.SessionID, Journey: id}
	var agent agentOutput
	var plain string
	var ran execOutput
	switch {
	case len(req.Command) > 0 && json.Unmarshal(out.Output, &ran) == nil && ran.ExitCode != nil:
		res.Output = ran.text()
	case json.Unmarshal(out.Output, &plain) == nil:
		res.Output = plain
	case json.Unmarshal(out.Output, &agent) == nil && agent.Output != nil && agent.SessionID != nil:
		// An agent worker's task: mesh_execute's result.
		res.Output, res.CostUSD = *agent.Output, agent.Metadata.CostUSD
		if res.SessionID == "" {
			res.SessionID = *agent.SessionID
		}
	case len(out.Output) > 0:
		res.Output = string(out.Output) // any other worker's output, as JSON
	}
	if res.SessionID != "" && req.OnSession != nil {
		req.OnSession(res.SessionID)
	}
	if req.Source != nil {
		// The node's result carries its change, taken through the
		// worker's result gate.
		patch, summary, err := e.diff(ctx, id)
		if err != nil {
			return res, err
		}
		res.Patch, res.PatchOmits, res.ChangeDigest = patch, summary.Omitted, summary.Digest
	}
	log.DebugContext(ctx, "task done", slog.String("session", res.SessionID))
	return res, nil
}

// Release stops the journey, workspace and agent session kept
// (stop_worker with workspace keep): its runs settled, and the next
// attempt in it resumes it. A journey that is gone is not an error.
// Stopping it ends the action running in it, if any.
func (e *Executor) Release(ctx context.Context, id string) error {
	e.mu.Lock()
	delete(e.journeys, id) // the next attempt asks the marketplace
	e.mu.Unlock()
	res, err := e.conn.CallIdempotent(ctx, &mcp.CallToolParams{Name: meshapi.ToolStopWorker, Arguments: map[string]any{
		"journey_id": id, "workspace": "keep",
	}})
	if err != nil {
		return fmt.Errorf("stop_worker %s: %w", id, err)
	}
	if e, _ := meshapi.ErrorOf(res); res.IsError && e.Code != meshapi.CodeNotFound {
		return fmt.Errorf("stop_worker %s: %w", id, e)
	}
	return nil
}

func (e *Executor) journey(id string) *journey {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.journeys[id]
	if j == nil {
		j = &journey{}
		e.journeys[id] = j
	}
	return j
}

// ensure spawns the journey's worker unless this process already did: a
// journey that does not exist yet is spawned (mode normal), a stopped,
// orphaned or failed one is resumed with its workspace and agent session,
// and a live one is reported already_active.
func (e *Executor) ensure(ctx context.Context, log *slog.Logger, j *journey, id, worker string, spawn spawnWith, onWorker func(string) error) error {
	if onWorker != nil {
		// Recorded before the journey is used, or started again: the run
		// stops it once it settles.
		if err := onWorker(id); err != nil {
			return fmt.Errorf("recording journey %s: %w", id, err)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.spawned {
		return nil
	}
	mode := "normal"
	state, err := e.state(ctx, id)
	if err != nil {
		return err
	}
	switch state {
	case "stopped", "orphaned", "failed":
		mode = "resume"
	}
	args := map[string]any{"worker_id": worker, "journey_id": id, "mode": mode}
	switch {
	case spawn.fresh:
		args["mode"], args["source"] = "fresh", spawn.source
	case spawn.source != nil && state == "":
		// A repository seeds the journey when it is first spawned; later
		// nodes of the role go on in the same workspace.
		args["source"] = spawn.source
	}
	// Made again on a new MCP session if the marketplace restarted during
	// the call: in mode normal or resume, a spawn that did happen is found
	// live and reported already_active, and one that did not is made; in
	// mode fresh (a node seeded from another's patch) it is seeded again,
	// which is what the node asked for.
	res, err := e.conn.CallIdempotent(ctx, &mcp.CallToolParams{Name: meshapi.ToolSpawnWorker, Arguments: args})
	if err != nil {
		return fmt.Errorf("spawn_worker: %w", err)
	}
	if res.IsError {
		e, _ := meshapi.ErrorOf(res)
		err := fmt.Errorf("spawn_worker %s for journey %s: %w", worker, id, e)
		switch e.Code {
		case meshapi.CodeInvalidArgument, meshapi.CodePermissionDenied, meshapi.CodeNotFound:
			// A source that is malformed, not allowed or not there
			// (a repository that does not exist), a worker not in the
			// catalog: the next attempt would meet the same.
			return executor.Refused(err)
		}
		return err
	}
	var out struct {
		State string `json:"state"`
	}
	_ = decode(res, &out)
	log.InfoContext(ctx, "worker spawned", slog.String("worker", worker), slog.Any("mode", args["mode"]), slog.String("state", out.State))
	j.spawned = true
	return nil
}

// state is the journey's state, or "" when the marketplace has no such
// journey (get_worker_state fails for it, as for any other failure; a real
// fault shows at spawn_worker).
func (e *Executor) state(ctx context.Context, id string) (string, error) {
	// A read: safe to make again on a new session.
	res, err := e.conn.CallIdempotent(ctx, &mcp.CallToolParams{Name: meshapi.ToolGetWorkerState, Arguments: map[string]any{"journey_id": id}})
	if err != nil {
		return "", fmt.Errorf("get_worker_state: %w", err)
	}
	if res.IsError {
		return "", nil
	}
	var out struct {
		State string `json:"state"`
	}
	if err := decode(res, &out); err != nil {
		return "", fmt.Errorf("get_worker_state: %w", err)
	}
	return out.State, nil
}

// errNotLive marks an execute_in_worker refused because the journey is not
// running; the action did not run.
var errNotLive = errors.New("journey is not live")

// execute runs the action (a task or a command) in the journey. The call is
// never made twice: cut off by a marketplace restart, it may have run.
func (e *Executor) execute(ctx context.Context, id string, act map[string]any, onEvent func(meshtype.AgentEvent)) (executeOut, error) {
	params := &mcp.CallToolParams{Name: meshapi.ToolExecuteInWorker, Arguments: map[string]any{
		"journey_id": id, "action": act,
	}}
	finish := func(map[string]any) {}
	if onEvent != nil {
		// An agent worker's events come back as progress.
		var token string
		token, finish = e.progress.Start(func(p *mcp.ProgressNotificationParams) {
			if ev, ok := executor.AgentEvent(p); ok {
				onEvent(ev)
			}
		})
		params.SetProgressToken(token)
	}
	res, err := e.conn.CallTool(ctx, params)
	if res != nil {
		finish(res.Meta)
	} else {
		finish(nil)
	}
	if err != nil {
		return executeOut{}, fmt.Errorf("execute_in_worker: %w", err)
	}
	var out executeOut
	decoded := decode(res, &out) == nil
	switch {
	case decoded && !out.Executed && (out.Message != "" || len(out.Violations) > 0):
		return out, &RefusedError{Tool: meshapi.ToolExecuteInWorker, Message: out.Message, Violations: out.Violations}
	case res.IsError:
		e, _ := meshapi.ErrorOf(res)
		// The marketplace checks that the journey runs before it runs
		// anything, and says so by its code.
		if e.Code == meshapi.CodeNotLive {
			return out, fmt.Errorf("execute_in_worker: %s: %w", e.Message, errNotLive)
		}
		err := fmt.Errorf("execute_in_worker: %w", e)
		if e.Code == meshapi.CodeInvalidArgument {
			return out, executor.Refused(err) // the task itself is refused (past its size limit)
		}
		return out, err
	case !decoded || !out.Executed:
		return out, fmt.Errorf("execute_in_worker: unexpected result %q", meshapi.ResultText(res))
	}
	return out, nil
}

// seededWorker is the worker part of a journey's key: the worker, and the
// repository its workspace is seeded from, if any, so that a thread whose
// repository changes gets a new workspace rather than the old one.
func seededWorker(worker string, repo map[string]any) string {
	if repo == nil {
		return worker
	}
	b, err := json.Marshal(repo) // map keys sorted: the same value, the same bytes
	if err != nil {
		return worker
	}
	sum := sha256.Sum256(b)
	return worker + "@" + hex.EncodeToString(sum[:12])
}

// spawnWith is what a spawn seeds the workspace with.
type spawnWith struct {
	source map[string]any // spawn_worker's source; nil for none
	fresh  bool           // spawn mode fresh, seeding every attempt
}

// spawnSource turns a request's source into spawn_worker's: a repository
// as is, or the from role's journey on this thread plus its patch.
func spawnSource(req executor.Request, thread string) (spawnWith, error) {
	src := req.Source
	switch {
	case src == nil:
		return spawnWith{}, nil
	case src.FromRole != "":
		fromThread := thread
		if src.FromThread != "" {
			fromThread = src.FromThread
		}
		from, err := JourneyID(src.FromRole, seededWorker(src.FromWorker, src.FromRepository), fromThread, "")
		if err != nil {
			return spawnWith{}, err
		}
		return spawnWith{source: map[string]any{"journey": from, "patch": src.Patch}, fresh: true}, nil
	case src.Repository == nil:
		return spawnWith{}, fmt.Errorf("role %q has a source without a repository", req.RoleName)
	}
	return spawnWith{source: src.Repository}, nil
}

// execOutput is an exec action's output (meshworker's exec tool).
type execOutput struct {
	ExitCode  *int   `json:"exit_code"`
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	TimedOut  bool   `json:"timed_out"`
	Truncated bool   `json:"truncated"`
}

// text is a command node's output: "exit_code: N" on the first line (so
// that a when condition can test it), then what the command printed.
func (o execOutput) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d\n", *o.ExitCode)
	if o.TimedOut {
		b.WriteString("timed out\n")
	}
	b.WriteString(o.Stdout)
	if o.Stderr != "" {
		if o.Stdout != "" && !strings.HasSuffix(o.Stdout, "\n") {
			b.WriteString("\n")
		}
		b.WriteString(o.Stderr)
	}
	if o.Truncated {
		b.WriteString("\n(output truncated)\n")
	}
	return b.String()
}

// diff takes the journey's change through workspace_diff: its patch and
// its summary (the changed files the patch leaves out, the workspace's
// digest). A change the worker's result gate refuses fails the attempt,
// with every violation.
func (e *Executor) diff(ctx context.Context, id string) (patch string, summary meshtype.ChangeSummary, err error) {
	res, err := e.conn.CallIdempotent(ctx, &mcp.CallToolParams{Name: meshapi.ToolWorkspaceDiff, Arguments: map[string]any{"journey_id": id}})
	if err != nil {
		return "", summary, fmt.Errorf("workspace_diff: %w", err)
	}
	var out struct {
		Patch      string                 `json:"patch"`
		Summary    meshtype.ChangeSummary `json:"summary"`
		Refused    bool                   `json:"refused"`
		Violations []meshtype.Violation   `json:"violations"`
		Message    string                 `json:"message"`
	}
	decoded := decode(res, &out) == nil
	switch {
	case decoded && out.Refused:
		return "", summary, &RefusedError{Tool: meshapi.ToolWorkspaceDiff, Message: out.Message, Violations: out.Violations}
	case res.IsError:
		me, _ := meshapi.ErrorOf(res)
		return "", summary, fmt.Errorf("%s: %w", meshapi.ToolWorkspaceDiff, me)
	case !decoded:
		return "", summary, fmt.Errorf("%s: an answer that is not its output: %.200s", meshapi.ToolWorkspaceDiff, meshapi.ResultText(res))
	}
	return out.Patch, out.Summary, nil
}

// Export takes a journey's workspace out (export_workspace, format tar or
// bundle) with the digest of the workspace it was taken from, in one call
// under the journey's lock, so that the caller can tell whether it is
// still the change of the attempt it asks for. The journey may be
// stopped: its kept workspace is read where it lies.
func (e *Executor) Export(ctx context.Context, journey, format string) (executor.Export, error) {
	res, err := e.conn.CallIdempotent(ctx, &mcp.CallToolParams{Name: meshapi.ToolExportWorkspace, Arguments: map[string]any{
		"journey_id": journey, "format": format,
	}})
	if err != nil {
		return executor.Export{}, fmt.Errorf("%w: %s: %w", executor.ErrUnreachable, meshapi.ToolExportWorkspace, err)
	}
	var out struct {
		ContentBase64 string                 `json:"content_base64"`
		SHA256        string                 `json:"sha256"`
		Commit        string                 `json:"commit"`
		Summary       meshtype.ChangeSummary `json:"summary"`
		meshapi.Refusal
	}
	decoded := decode(res, &out) == nil
	switch {
	case decoded && out.Refused:
		return executor.Export{}, meshapi.Errorf(meshapi.CodePermissionDenied, "%s", out.Message)
	case res.IsError:
		me, _ := meshapi.ErrorOf(res)
		return executor.Export{}, fmt.Errorf("%s: %w", meshapi.ToolExportWorkspace, me)
	case !decoded:
		return executor.Export{}, fmt.Errorf("%s: an answer that is not its output: %.200s", meshapi.ToolExportWorkspace, meshapi.ResultText(res))
	}
	content, err := base64.StdEncoding.DecodeString(out.ContentBase64)
	if err != nil {
		return executor.Export{}, fmt.Errorf("%s: content_base64: %w", meshapi.ToolExportWorkspace, err)
	}
	if sum := sha256.Sum256(content); hex.EncodeToString(sum[:]) != out.SHA256 {
		return executor.Export{}, fmt.Errorf("%s: the content's SHA-256 is %x, not the %q it names", meshapi.ToolExportWorkspace, sum, out.SHA256)
	}
	return executor.Export{Digest: out.Summary.Digest, Content: content, SHA256: out.SHA256, Commit: out.Commit}, nil
}

// decode reads a tool result's structured content, or else its text as
// JSON, into v.
func decode(res *mcp.CallToolResult, v any) error {
	raw := []byte(meshapi.ResultText(res))
	if res.StructuredContent != nil {
		var err error
		if raw, err = json.Marshal(res.StructuredContent); err != nil {
			return err
		}
	}
	return json.Unmarshal(raw, v)
}
