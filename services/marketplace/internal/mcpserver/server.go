// Package mcpserver exposes the marketplace as MCP tools (list_workers,
// describe_worker, spawn_worker, execute_in_worker, get_worker_state,
// list_journeys, journey_audit, stop_worker, worker_logs) on the official MCP Go SDK.
//
// Every ordinary failure, bad input included, is a tool result with isError
// and a message that says what to do; protocol errors are left to the SDK.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/action"
	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	meshprogress "github.com/meshwork/meshwork/pkg/progress"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
)

// executeArgumentsError says what is wrong with execute_in_worker's
// arguments in the client's terms (a field, the JSON it holds), not the
// decoder's (a Go type).
func executeArgumentsError(err error) string {
	const want = "arguments are {journey_id, action} with no other fields"
	var se *json.SemanticError
	if errors.As(err, &se) {
		field := strings.TrimPrefix(string(se.JSONPointer), "/")
		switch {
		case se.Err != nil && strings.Contains(se.Err.Error(), "unknown"):
			return fmt.Sprintf("unknown field %q: %s", field, want)
		case field == "journey_id" && se.JSONKind != 0:
			return fmt.Sprintf("journey_id: want a string, got a JSON %s", action.KindName(se.JSONKind))
		case field == "" && se.JSONKind != 0:
			return fmt.Sprintf("want an object, got a JSON %s: %s", action.KindName(se.JSONKind), want)
		}
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return "arguments are not valid JSON: " + syn.Err.Error()
	}
	return want + ": " + err.Error()
}

// MaxExecuteArguments bounds execute_in_worker's arguments (the action plus
// the journey id), before anything is decoded.
const MaxExecuteArguments = 34 << 20

// New builds the marketplace's MCP server.
func New(mgr *journeys.Manager, catalog *workerdef.Catalog, caller meshapi.CallerFunc, logger *slog.Logger) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "meshwork-marketplace", Title: "Meshwork marketplace", Version: buildinfo.Version},
		&mcp.ServerOptions{Logger: logger, Instructions: instructions})
	// HTTPParent runs first: over HTTP, a request's span is the HTTP
	// request's unless params._meta carries the client's trace context.
	s.AddReceivingMiddleware(telemetry.HTTPParent(), telemetry.ServerMiddleware(), meshapi.ErrorMiddleware())
	h := &handlers{mgr: mgr, catalog: catalog, caller: caller, logger: logger}

	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolListWorkers, Description: "List the workers of the catalog: id, name, description, kind, tools and a summary of their constraints."}, h.listWorkers)
	mcp.AddTool(s, &mcp.Tool{
		Name: meshapi.ToolDescribeWorker, Description: "Show one worker's full definition, after extends and defaults, with its version hash.",
		OutputSchema: describeSchema(),
	}, h.describeWorker)
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolSpawnWorker, Description: "Start a worker for a journey in its own isolated container with a workspace. Modes: normal (reports already_active if running), resume (restart a stopped or orphaned journey with its workspace), fresh (destroy and respawn)."}, tool(h, meshapi.ToolSpawnWorker, mgr.Spawn))
	s.AddTool(&mcp.Tool{
		Name:        meshapi.ToolExecuteInWorker,
		Description: "Run one action in a journey's worker. The worker's constraint gate checks it first; a refused action returns executed:false with every violation and never reaches the worker.",
		InputSchema: executeSchema(),
	}, h.execute)
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolGetWorkerState, Description: "Show a journey: state, worker, container, times, action counts, cost so far and agent session."}, tool(h, meshapi.ToolGetWorkerState, h.state))
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolJourneyAudit, Description: "A journey's audit log, newest first, a page at a time: each action with the gate's decision and every violation, results taken out, the agent's own tool calls (type agent_tool, under their action) and egress connections."}, tool(h, meshapi.ToolJourneyAudit, mgr.Audit))
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolListJourneys, Description: "List your journeys, newest first, optionally in one state, a page at a time (next_cursor leads to the next page)."}, tool(h, meshapi.ToolListJourneys, mgr.List))
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolStopWorker, Description: "Stop a journey's worker and keep (default), archive (tarball), patch (return the diff against the base, passed by the result gate, then remove everything) or delete its workspace."}, tool(h, meshapi.ToolStopWorker, mgr.Stop))
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolWorkspaceDiff, Description: "The journey's change against the base it was spawned from, as a git-format unified diff (git apply takes it) with a summary: files added, modified, deleted, renamed; lines; binary files listed. The worker's own .git is never consulted. The worker's result gate checks the change first; a refusal lists every violation."}, tool(h, meshapi.ToolWorkspaceDiff, mgr.Diff))
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolExportWorkspace, Description: "Take the journey's work out as a patch (the diff), a tar of the workspace, or a git bundle of one commit on the git source's commit (git fetch takes it). Checked by the worker's result gate first."}, tool(h, meshapi.ToolExportWorkspace, mgr.Export))
	mcp.AddTool(s, &mcp.Tool{Name: meshapi.ToolWorkerLogs, Description: "Show the last lines of a journey's worker output."}, tool(h, meshapi.ToolWorkerLogs, h.logs))
	return s
}

const instructions = `Meshwork runs workers in isolated containers. Call list_workers, then
spawn_worker {worker_id, journey_id, source?} (source: {git: {url, ref}},
{archive: {tar_gz_base64, sha256}} or {journey, patch}), then execute_in_worker
{journey_id, action} with actions such as {"type":"read","target":"README.md"}.
Every action is checked against the worker's constraints first; refusals list
every violated constraint. workspace_diff and export_workspace take the change
out, checked by the worker's result gate.`

type handlers struct {
	mgr     *journeys.Manager
	catalog *workerdef.Catalog
	caller  meshapi.CallerFunc
	logger  *slog.Logger
}

// clientError is what a client is told of a failure: errors meant for it
// keep their message and code; anything else is logged and reported
// plainly, as meshapi.CodeInternal. It is always a *meshapi.Error.
func (h *handlers) clientError(ctx context.Context, tool string, err error) error {
	if e, ok := journeys.AsError(err); ok {
		return e
	}
	h.logger.ErrorContext(ctx, "tool failed", slog.String("tool", tool), slog.Any("error", err))
	return meshapi.Errorf(meshapi.CodeInternal, "internal error; the marketplace logged it")
}

// failure is clientError as a tool result, for the raw execute_in_worker handler.
func (h *handlers) failure(ctx context.Context, tool string, err error) *mcp.CallToolResult {
	e, _ := meshapi.AsError(h.clientError(ctx, tool, err))
	return meshapi.ErrorResult(e)
}

// WorkerSummary is one entry of list_workers.
type WorkerSummary struct {
	ID          string             `json:"id"`
	Name        string             `json:"name"`
	Description string             `json:"description"`
	Kind        string             `json:"kind"`
	Tools       []string           `json:"tools"`
	Constraints ConstraintsSummary `json:"constraints"`
}

// ConstraintsSummary is the gist of a worker's constraints.
type ConstraintsSummary struct {
	Readonly     bool     `json:"readonly"`
	MaxFileSize  int64    `json:"max_file_size_bytes,omitempty"`
	AllowedPaths []string `json:"allowed_paths,omitempty"`
	DeniedPaths  []string `json:"denied_paths,omitempty"`
	Commands     []string `json:"commands,omitempty"`
	MaxActions   int64    `json:"max_actions,omitempty"`
	MaxCostUSD   float64  `json:"max_cost_usd,omitempty"`
	// Network is none, egress or "bridge (unrestricted)": an open network
	// is marked as such.
	Network string `json:"network"`
	// Egress is what an egress worker may reach.
	Egress []string `json:"egress,omitempty"`
	Rules  []string `json:"rules,omitempty" jsonschema:"ids of the worker's CEL rules"`
}

type listWorkersIn struct{}

type listWorkersOut struct {
	Workers []WorkerSummary `json:"workers"`
}

func (h *handlers) listWorkers(ctx context.Context, _ *mcp.CallToolRequest, _ listWorkersIn) (*mcp.CallToolResult, listWorkersOut, error) {
	var out listWorkersOut
	for _, e := range h.catalog.Entries() {
		d := e.Definition
		c := d.Constraints
		sum := WorkerSummary{
			ID: d.ID, Name: d.Name, Description: d.Description, Kind: string(d.Kind), Tools: d.Tools,
			Constraints: ConstraintsSummary{
				Readonly: c.Readonly, MaxFileSize: int64(c.MaxFileSize), AllowedPaths: c.AllowedPaths,
				DeniedPaths: c.DeniedPaths, Commands: c.Commands, MaxActions: c.MaxActions, MaxCostUSD: c.MaxCostUSD, Network: networkSummary(d.Isolation.Network), Egress: d.Isolation.Egress,
			},
		}
		for _, r := range c.Rules {
			sum.Constraints.Rules = append(sum.Constraints.Rules, r.ID)
		}
		out.Workers = append(out.Workers, sum)
	}
	return nil, out, nil
}

type describeIn struct {
	WorkerID string `json:"worker_id" jsonschema:"id of a catalog worker"`
}

type describeOut struct {
	DefinitionHash string              `json:"definition_hash"`
	Definition     meshtype.Definition `json:"definition"`
}

// describeSchema is describe_worker's output schema, with the definition's
// durations and sizes as they are written.
func describeSchema() *jsonschema.Schema {
	s, err := jsonschema.For[describeOut](&jsonschema.ForOptions{TypeSchemas: workerdef.TypeSchemas()})
	if err != nil {
		panic(err)
	}
	return s
}

func (h *handlers) describeWorker(ctx context.Context, _ *mcp.CallToolRequest, in describeIn) (*mcp.CallToolResult, describeOut, error) {
	e, err := h.mgr.Worker(in.WorkerID)
	if err != nil {
		return nil, describeOut{}, err
	}
	return nil, describeOut{DefinitionHash: e.Hash, Definition: e.Definition}, nil
}

// networkSummary names a worker's network for list_workers, marking the
// open one.
func networkSummary(n meshtype.NetworkMode) string {
	if n == meshtype.NetworkBridge {
		return "bridge (unrestricted)"
	}
	return string(n)
}

// executeIn is execute_in_worker's input, for its schema; the handler decodes
// the raw arguments itself, strictly.
type executeIn struct {
	JourneyID string         `json:"journey_id" jsonschema:"the journey to run the action in"`
	Action    map[string]any `json:"action" jsonschema:"one action: {type: read|write|list|search|exec|delete|task|tool, target, content, pattern, command, task, tool, arguments}"`
}

func executeSchema() *jsonschema.Schema {
	s, err := jsonschema.For[executeIn](nil)
	if err != nil {
		panic(err)
	}
	return s
}

// execute handles execute_in_worker with the raw arguments: the SDK's typed
// decoding would merge duplicate keys before the strict action decoder could
// refuse them.
func (h *handlers) execute(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
	defer func() {
		// One bad request must not take the marketplace down.
		if p := recover(); p != nil {
			res, err = h.failure(ctx, meshapi.ToolExecuteInWorker, fmt.Errorf("panic: %v", p)), nil
		}
	}()
	caller, err := h.caller(req)
	if err != nil {
		return h.failure(ctx, meshapi.ToolExecuteInWorker, &journeys.Error{Code: meshapi.CodeUnauthenticated, Message: err.Error()}), nil //nolint:nilerr // a tool result with isError, not a protocol error
	}
	raw := []byte(req.Params.Arguments)
	if len(raw) > MaxExecuteArguments {
		return h.failure(ctx, meshapi.ToolExecuteInWorker, &journeys.Error{
			Code:    journeys.CodeInvalidArgument,
			Message: fmt.Sprintf("arguments are %d bytes; the limit is %d", len(raw), MaxExecuteArguments),
		}), nil
	}
	var in struct {
		JourneyID string         `json:"journey_id"`
		Action    jsontext.Value `json:"action"`
	}
	if err := json.Unmarshal(raw, &in, json.RejectUnknownMembers(true)); err != nil {
		//nolint:nilerr // bad arguments are a tool result with isError
		return h.failure(ctx, meshapi.ToolExecuteInWorker, &journeys.Error{Code: journeys.CodeInvalidArgument, Message: executeArgumentsError(err)}), nil
	}
	if in.JourneyID == "" || len(in.Action) == 0 {
		return h.failure(ctx, meshapi.ToolExecuteInWorker, &journeys.Error{Code: journeys.CodeInvalidArgument, Message: "journey_id and action are required"}), nil
	}
	var (
		mu   sync.Mutex
		sent int
	)
	if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
		// The worker's progress (an agent's events) goes on to the client.
		ctx = journeys.WithProgress(ctx, func(msg string, m map[string]any) {
			mu.Lock()
			defer mu.Unlock()
			sent++
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(sent), Message: msg, Meta: m})
		})
		defer func() {
			// How many the client should wait for (package progress).
			if res != nil {
				mu.Lock()
				res.Meta = mcp.Meta{meshprogress.SentMetaKey: sent}
				mu.Unlock()
			}
		}()
	}
	out, err := h.mgr.Execute(ctx, caller, in.JourneyID, in.Action)
	if err != nil {
		return h.failure(ctx, meshapi.ToolExecuteInWorker, err), nil
	}
	text, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	// A refusal is an ordinary failure for the client: isError, with the
	// structured violations beside the message.
	return &mcp.CallToolResult{IsError: !out.Executed, StructuredContent: out, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}, nil
}

type journeyIn struct {
	JourneyID string `json:"journey_id"`
}

type logsIn struct {
	JourneyID string `json:"journey_id"`
	Tail      int    `json:"tail,omitempty" jsonschema:"lines to return (default 100, at most 10000)"`
}

// tool adapts op into a tool handler (meshapi.Tool) with this server's
// caller and errors.
func tool[In, Out any](h *handlers, name string, op func(ctx context.Context, caller string, in In) (Out, error)) mcp.ToolHandlerFor[In, Out] {
	return meshapi.Tool(name, h.caller, h.clientError, op)
}

func (h *handlers) state(ctx context.Context, caller string, in journeyIn) (journeys.WorkerState, error) {
	return h.mgr.State(ctx, caller, in.JourneyID)
}

func (h *handlers) logs(ctx context.Context, caller string, in logsIn) (journeys.LogsResult, error) {
	return h.mgr.Logs(ctx, caller, in.JourneyID, in.Tail)
}
