// Package mcptools exposes the orchestrator's operations as MCP tools on the
// official Go SDK: run_pipeline, get_run, list_runs, list_checkpoints,
// fork_run, resume_run, cancel_run and list_pipelines. The server is served
// over streamable HTTP at /mcp (package httpapi, behind bearer tokens) and
// over stdio (`orchestrator mcp`).
//
// Every ordinary failure, bad input included, is a tool result with isError
// and a message that says what to do; protocol errors are left to the SDK.
package mcptools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/mcphttp"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Config configures the tools.
type Config struct {
	// Engine serves the operations. Required.
	Engine *engine.Engine
	// Caller names who calls; it is recorded with the runs started and the
	// decisions made. Defaults to TokenCaller.
	Caller meshapi.CallerFunc
	// Admins are the callers that see and act on every caller's runs;
	// any other caller sees only the runs it started. Defaults to none.
	Admins []string
	// OnRunStarted, when set, is called with each run or fork the tools
	// start (for metrics). Defaults to none.
	OnRunStarted func(api.Run)
	// Logger receives the errors behind "internal error" results. Defaults
	// to discarding them.
	Logger *slog.Logger
}

const instructions = `The Meshwork orchestrator runs multi-agent pipelines as checkpointed graphs.
Call list_pipelines, then run_pipeline {pipeline, inputs}; poll get_run {run_id} until its
status is succeeded, failed, cancelled or waiting. A waiting run has a pending interrupt
(an approval): resume it with resume_run {interrupt_id, value}. list_checkpoints and
fork_run {run_id, seq} go back in time; resume_run {run_id} retries a failed run.`

// New builds the orchestrator's MCP server.
func New(cfg Config) (*mcp.Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("mcptools: Engine is required")
	}
	t := &tools{eng: cfg.Engine, caller: cfg.Caller, onStart: cfg.OnRunStarted, logger: cfg.Logger, admins: map[string]bool{}}
	for _, a := range cfg.Admins {
		t.admins[a] = true
	}
	if t.caller == nil {
		t.caller = meshapi.TokenCaller
	}
	if t.logger == nil {
		t.logger = slog.New(slog.DiscardHandler)
	}
	if t.onStart == nil {
		t.onStart = func(api.Run) {}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "meshwork-orchestrator", Title: "Meshwork orchestrator", Version: buildinfo.Version},
		&mcp.ServerOptions{Logger: t.logger, Instructions: instructions})
	// Each call is a server span, the child of the trace context the client
	// sent in params._meta (else of the HTTP request's span); a run started
	// by the call keeps that trace.
	s.AddReceivingMiddleware(telemetry.ServerMiddleware(), meshapi.ErrorMiddleware())
	add(s, t, "list_pipelines", "List the pipelines runs may name: name, description, inputs (type, required, default) and definition hash.", t.listPipelines)
	add(s, t, "run_pipeline", "Start a run of a pipeline with inputs. Returns the run; poll get_run for its progress.", t.runPipeline)
	add(s, t, "get_run", "Show a run: status, each node's state, output, patch (a git-format diff) and the changed files it leaves out (patch_omits: over 4 MiB), patch_node (the node whose patch is the run's), role sessions, interrupts (pending approvals) and attempts.", t.getRun)
	add(s, t, "list_runs", "List runs, newest first, optionally of one pipeline, status or thread.", t.listRuns)
	add(s, t, "list_checkpoints", "List a run's checkpoints in order: what each one changed, and where it comes from.", t.listCheckpoints)
	add(s, t, "fork_run", "Start a new run from a checkpoint of another, optionally patching inputs or node states (a node set to pending runs again).", t.forkRun)
	add(s, t, "resume_run", "Resume a pending approval with interrupt_id and value (the decision), or a failed run with run_id (its failed nodes run again). Refused as a conflict when it would set the run going while another run works on its thread.", t.resumeRun)
	add(s, t, "cancel_run", "Cancel a running or waiting run.", t.cancelRun)
	add(s, t, "export_node_workspace", "Take out the workspace that holds a node's change, whole (files too large for its patch included), base64-encoded: a git bundle of one commit on the git source's commit (git pull FILE meshwork), or a tar. At most 32 MiB; refused (conflict) once a later attempt in the node's journey changed it.", t.exportNodeWorkspace)
	return s, nil
}

// HTTPHandler serves s over MCP's streamable HTTP transport, stateless
// (mcphttp.Handler); the API's router checks the bearer token before it.
func HTTPHandler(s *mcp.Server, logger *slog.Logger) http.Handler {
	return mcphttp.Handler(s, mcphttp.HandlerOptions{Logger: logger, MaxRequestBytes: api.MaxRequestBytes})
}

// add registers a tool whose schemas are inferred from In and Out, raw JSON
// (a decision's value) being any JSON.
func add[In, Out any](s *mcp.Server, t *tools, name, description string, h func(context.Context, string, In) (Out, error)) {
	opts := &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[json.RawMessage](): {}}}
	in, err := jsonschema.For[In](opts)
	if err != nil {
		panic(fmt.Sprintf("mcptools: %s input: %v", name, err))
	}
	out, err := jsonschema.For[Out](opts)
	if err != nil {
		panic(fmt.Sprintf("mcptools: %s output: %v", name, err))
	}
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: description, InputSchema: in, OutputSchema: out},
		meshapi.Tool(name, t.caller, t.clientError, func(ctx context.Context, caller string, args In) (Out, error) {
			return h(engine.WithViewer(ctx, engine.Viewer{Caller: caller, Admin: t.admins[caller]}), caller, args)
		}))
}

type tools struct {
	eng     *engine.Engine
	caller  meshapi.CallerFunc
	admins  map[string]bool
	onStart func(api.Run)
	logger  *slog.Logger
}

// clientError is what a client is told of a failure: the engine's errors
// meant for callers keep their message; anything else is logged and
// reported plainly; the code (meshapi.Code) goes to the client in the
// error's structured content.
func (t *tools) clientError(ctx context.Context, tool string, err error) error {
	if code := engine.ErrorCode(err); code != meshapi.CodeInternal {
		return &meshapi.Error{Code: code, Message: err.Error()}
	}
	t.logger.ErrorContext(ctx, "tool failed", slog.String("tool", tool), slog.Any("error", err))
	return meshapi.Errorf(meshapi.CodeInternal, "internal error; the orchestrator logged it")
}

type listPipelinesIn struct{}

func (t *tools) listPipelines(_ context.Context, _ string, _ listPipelinesIn) (api.PipelineList, error) {
	return api.PipelineList{Pipelines: t.eng.Pipelines()}, nil
}

type runPipelineIn struct {
	Pipeline string         `json:"pipeline" jsonschema:"a pipeline of list_pipelines"`
	Inputs   map[string]any `json:"inputs,omitempty" jsonschema:"the run's inputs, by name"`
	Thread   string         `json:"thread,omitempty" jsonschema:"continue the role sessions of earlier runs on this thread (a run that would run while another works on it is refused as a conflict); empty starts a new one"`
}

func (t *tools) runPipeline(ctx context.Context, caller string, in runPipelineIn) (api.Run, error) {
	run, err := t.eng.StartRun(ctx, engine.StartRequest{Pipeline: in.Pipeline, Inputs: in.Inputs, Thread: in.Thread, Caller: caller})
	if err == nil {
		t.onStart(run)
	}
	return run, err
}

type runIDIn struct {
	RunID string `json:"run_id" jsonschema:"the run's id"`
}

func (t *tools) getRun(ctx context.Context, _ string, in runIDIn) (api.RunView, error) {
	return t.eng.GetRun(ctx, in.RunID)
}

type exportNodeWorkspaceIn struct {
	RunID  string `json:"run_id" jsonschema:"the run's id"`
	Node   string `json:"node" jsonschema:"a node with a source (it works on a repository) that succeeded, such as the run's patch_node"`
	Format string `json:"format,omitempty" jsonschema:"bundle (default; a git source only) or tar"`
}

type exportNodeWorkspaceOut struct {
	RunID   string `json:"run_id"`
	Node    string `json:"node"`
	Journey string `json:"journey" jsonschema:"the marketplace journey whose workspace it is"`
	Format  string `json:"format"`
	Bytes   int    `json:"bytes"`
	SHA256  string `json:"sha256"`
	Commit  string `json:"commit,omitempty" jsonschema:"a bundle's commit, as refs/heads/meshwork"`
	Content string `json:"content_base64" jsonschema:"the bundle or the tar, base64-encoded"`
}

func (t *tools) exportNodeWorkspace(ctx context.Context, _ string, in exportNodeWorkspaceIn) (exportNodeWorkspaceOut, error) {
	var out exportNodeWorkspaceOut
	err := t.eng.ExportWorkspace(ctx, in.RunID, in.Node, in.Format, func(ws engine.WorkspaceExport) error {
		out = exportNodeWorkspaceOut{
			RunID: ws.RunID, Node: ws.NodeID, Journey: ws.Journey, Format: ws.Format, Bytes: len(ws.Content), SHA256: ws.SHA256, Commit: ws.Commit,
			Content: base64.StdEncoding.EncodeToString(ws.Content),
		}
		return nil
	})
	return out, err
}

type listRunsIn struct {
	Pipeline string `json:"pipeline,omitempty" jsonschema:"only runs of this pipeline"`
	Status   string `json:"status,omitempty" jsonschema:"only runs with this status: running, waiting, succeeded, failed or cancelled"`
	Thread   string `json:"thread,omitempty" jsonschema:"only runs on this thread"`
	Limit    int    `json:"limit,omitempty" jsonschema:"at most this many runs, up to 1000; default 50"`
	Before   string `json:"before,omitempty" jsonschema:"page: only runs created before this run id"`
}

func (t *tools) listRuns(ctx context.Context, _ string, in listRunsIn) (api.RunList, error) {
	runs, err := t.eng.ListRuns(ctx, store.ListFilter{Pipeline: in.Pipeline, Status: in.Status, Thread: in.Thread, Limit: in.Limit, Before: in.Before})
	return api.RunList{Runs: runs}, err
}

func (t *tools) listCheckpoints(ctx context.Context, _ string, in runIDIn) (api.CheckpointList, error) {
	cps, err := t.eng.Checkpoints(ctx, in.RunID)
	return api.CheckpointList{Checkpoints: cps}, err
}

type forkRunIn struct {
	RunID   string      `json:"run_id" jsonschema:"the run to fork"`
	Seq     int         `json:"seq" jsonschema:"the checkpoint to fork from (list_checkpoints)"`
	Patch   *statePatch `json:"patch,omitempty" jsonschema:"changes to the state before the fork runs: inputs, and nodes (status pending runs a node again)"`
	Thread  string      `json:"thread,omitempty" jsonschema:"the fork's thread (a fork that would run while another run works on it is refused as a conflict); empty starts a new one with the checkpoint's role sessions"`
	Migrate bool        `json:"migrate,omitempty" jsonschema:"run under the pipeline's current definition if it changed since the run started"`
}

// statePatch is a fork's patch as tools take it: every field of a node's
// state but its status is optional.
type statePatch struct {
	Inputs map[string]any       `json:"inputs,omitempty" jsonschema:"the fork's inputs, all of them, checked against the pipeline"`
	Nodes  map[string]nodePatch `json:"nodes,omitempty" jsonschema:"node states by node id"`
}

type nodePatch struct {
	Status    string `json:"status" jsonschema:"pending (the node runs again), succeeded or skipped"`
	Output    string `json:"output,omitempty" jsonschema:"the node's output, for succeeded"`
	Attempts  int    `json:"attempts,omitempty"`
	Iteration int    `json:"iteration,omitempty"`
}

func (p *statePatch) state() *runstate.State {
	if p == nil {
		return nil
	}
	st := &runstate.State{Inputs: p.Inputs}
	if p.Nodes != nil {
		st.Nodes = map[string]pipeline.NodeState{}
		for id, n := range p.Nodes {
			st.Nodes[id] = pipeline.NodeState{Status: n.Status, Output: n.Output, Attempts: n.Attempts, Iteration: n.Iteration}
		}
	}
	return st
}

func (t *tools) forkRun(ctx context.Context, caller string, in forkRunIn) (api.Run, error) {
	run, err := t.eng.Fork(ctx, engine.ForkRequest{RunID: in.RunID, Seq: in.Seq, Patch: in.Patch.state(), Thread: in.Thread, Migrate: in.Migrate, Caller: caller})
	if err == nil {
		t.onStart(run)
	}
	return run, err
}

type resumeRunIn struct {
	InterruptID string `json:"interrupt_id,omitempty" jsonschema:"the pending approval to resume (get_run: interrupts)"`
	Value       any    `json:"value,omitempty" jsonschema:"the decision, any JSON such as \"approved\"; it becomes the approval's output"`
	RunID       string `json:"run_id,omitempty" jsonschema:"instead of interrupt_id: a failed run, whose failed nodes run again"`
	Migrate     bool   `json:"migrate,omitempty" jsonschema:"continue under the pipeline's current definition if it changed since the run started"`
}

func (t *tools) resumeRun(ctx context.Context, caller string, in resumeRunIn) (api.Run, error) {
	req := engine.ResumeRequest{InterruptID: in.InterruptID, RunID: in.RunID, Migrate: in.Migrate, DecidedBy: caller}
	if in.Value != nil {
		v, err := json.Marshal(in.Value)
		if err != nil {
			return api.Run{}, &engine.InvalidError{Msg: fmt.Sprintf("value: %v", err)}
		}
		req.Value = v
	}
	if in.RunID != "" && in.Value != nil {
		return api.Run{}, &engine.InvalidError{Msg: "value goes with interrupt_id; a failed run (run_id) is resumed without one"}
	}
	return t.eng.Resume(ctx, req)
}

func (t *tools) cancelRun(ctx context.Context, _ string, in runIDIn) (api.Run, error) {
	return t.eng.Cancel(ctx, in.RunID)
}
