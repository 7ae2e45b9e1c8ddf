package mcptools_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/httpapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/mcptools"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const carolToken = "carol-token-0123456789"

type bundle struct {
	session *mcp.ClientSession
	eng     *engine.Engine
	mu      sync.Mutex
	started []string
}

// setup serves the tools at /mcp of the HTTP API, behind its bearer tokens,
// and connects a client as carol over streamable HTTP.
func setup(t *testing.T) *bundle {
	t.Helper()
	eb := enginetest.Start(t)
	b := &bundle{eng: eb.Engine}
	srv := serveTools(t, mcptools.Config{Engine: eb.Engine, OnRunStarted: func(r api.Run) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.started = append(b.started, r.ID)
	}})
	b.session = mcptest.Connect(t, srv.URL+"/mcp", carolToken, &mcptest.Options{Base: srv.Client().Transport})
	return b
}

// serveTools serves the tools of cfg at /mcp of the HTTP API, as
// orchestrator serve does, behind carol's bearer token: the tests' clients
// reach the tools over real streamable HTTP.
func serveTools(t *testing.T, cfg mcptools.Config) *httptest.Server {
	t.Helper()
	tools, err := mcptools.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := bearer.New(map[string]string{"carol": carolToken})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{
		Engine: cfg.Engine, Tokens: tokens,
		MCP: mcptools.HTTPHandler(tools, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv
}

// callTool calls a tool that must succeed and decodes its structured result.
func (b *bundle) callTool(t *testing.T, name string, args map[string]any, out any) {
	t.Helper()
	res, err := b.session.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %s", name, text(res))
	}
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: decoding %s: %v", name, data, err)
	}
}

// toolError calls a tool that must fail with a tool error (isError), not a
// protocol error, and returns its message.
func (b *bundle) toolError(t *testing.T, name string, args map[string]any) string {
	t.Helper()
	res, err := b.session.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v, want a tool error", name, err)
	}
	if !res.IsError {
		t.Fatalf("%s succeeded, want a tool error", name)
	}
	return text(res)
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// settle waits until the run ends or waits for an approval, then reads it
// with get_run.
func (b *bundle) settle(t *testing.T, runID string) api.RunView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.eng.Watch(ctx, runID, -1, func(engine.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	var v api.RunView
	b.callTool(t, "get_run", map[string]any{"run_id": runID}, &v)
	return v
}

func TestTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// HTTPHandler is stateless: the server keeps no session between
	// requests, and the caller still comes from each request's token.
	if id := b.session.ID(); id != "" {
		t.Errorf("session id %q; want none from a stateless server", id)
	}

	tools, err := b.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"run_pipeline", "get_run", "list_runs", "list_checkpoints", "fork_run", "resume_run", "cancel_run", "list_pipelines", "export_node_workspace"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("tools %v lack %s", names, want)
		}
	}

	var pl struct{ Pipelines []api.PipelineSummary }
	b.callTool(t, "list_pipelines", nil, &pl)
	if len(pl.Pipelines) != 3 || pl.Pipelines[0].Name != "approval" {
		t.Errorf("pipelines %+v", pl.Pipelines)
	}

	var run api.Run
	b.callTool(t, "run_pipeline", map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "via mcp"}}, &run)
	if run.Caller != "carol" || run.Status != runstate.RunRunning {
		t.Errorf("started %+v: want running, by carol", run)
	}
	v := b.settle(t, run.ID)
	if v.Status != runstate.RunSucceeded || v.Outputs["second"] != "b: second: a: first: via mcp" {
		t.Fatalf("run %s, outputs %v", v.Status, v.Outputs)
	}

	var list struct{ Runs []api.Run }
	b.callTool(t, "list_runs", map[string]any{"status": "succeeded"}, &list)
	if len(list.Runs) != 1 || list.Runs[0].ID != run.ID {
		t.Errorf("list_runs %+v", list.Runs)
	}
	var cps struct{ Checkpoints []store.Checkpoint }
	b.callTool(t, "list_checkpoints", map[string]any{"run_id": run.ID}, &cps)
	if len(cps.Checkpoints) != 3 {
		t.Fatalf("%d checkpoints, want 3", len(cps.Checkpoints))
	}
	var fork api.Run
	b.callTool(t, "fork_run", map[string]any{"run_id": run.ID, "seq": 1, "patch": map[string]any{"nodes": map[string]any{"first": map[string]any{"status": "pending"}}}}, &fork)
	if fork.ForkedFromRun != run.ID || fork.Caller != "carol" {
		t.Errorf("fork %+v", fork)
	}
	if fv := b.settle(t, fork.ID); fv.Status != runstate.RunSucceeded {
		t.Errorf("fork %s: %s", fv.Status, fv.Error)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.started) != 2 {
		t.Errorf("OnRunStarted saw %d runs, want 2", len(b.started))
	}
}

func TestApprovalTools(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var run api.Run
	b.callTool(t, "run_pipeline", map[string]any{"pipeline": "approval"}, &run)
	v := b.settle(t, run.ID)
	if v.Status != runstate.RunWaiting || len(v.Interrupts) != 1 {
		t.Fatalf("run %s, interrupts %+v", v.Status, v.Interrupts)
	}
	b.callTool(t, "resume_run", map[string]any{"interrupt_id": v.Interrupts[0].ID, "value": map[string]any{"approved": true}}, &run)
	v = b.settle(t, run.ID)
	if v.Status != runstate.RunSucceeded || v.Interrupts[0].DecidedBy != "carol" || v.Outputs["publish"] != `a: publish with {"approved":true}` {
		t.Errorf("run %s, interrupt %+v, outputs %v", v.Status, v.Interrupts[0], v.Outputs)
	}
	msg := b.toolError(t, "resume_run", map[string]any{"interrupt_id": v.Interrupts[0].ID, "value": "again"})
	if !strings.Contains(msg, "already resumed") {
		t.Errorf("resuming twice: %q", msg)
	}
	b.callTool(t, "run_pipeline", map[string]any{"pipeline": "approval"}, &run)
	b.settle(t, run.ID)
	b.callTool(t, "cancel_run", map[string]any{"run_id": run.ID}, &run)
	if run.Status != runstate.RunCancelled {
		t.Errorf("cancel_run: %s", run.Status)
	}
}

// Ordinary failures are tool results with isError and a message that says
// what is wrong, never protocol errors.
func TestToolErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"get_run", map[string]any{"run_id": "00000000-0000-0000-0000-000000000000"}, "not found"},
		{"get_run", map[string]any{}, "run_id"},
		{"run_pipeline", map[string]any{"pipeline": "nope"}, `pipeline "nope": not found (known: approval, echo, signoff)`},
		{"run_pipeline", map[string]any{"pipeline": "echo"}, "task"},
		{"run_pipeline", map[string]any{"pipeline": "echo", "bogus": 1}, "bogus"},
		{"list_runs", map[string]any{"status": "done"}, "status"},
		{"list_runs", map[string]any{"limit": 1001}, "limit 1001 is not from 1 to 1000"},
		{"list_runs", map[string]any{"thread": "a\x00b"}, "thread must not contain a NUL"},
		{"list_checkpoints", map[string]any{"run_id": "nope"}, "not found"},
		{"fork_run", map[string]any{"run_id": "nope", "seq": 0}, "not found"},
		{"resume_run", map[string]any{}, "interrupt_id"},
		{"resume_run", map[string]any{"interrupt_id": "00000000-0000-0000-0000-000000000000", "value": "x"}, "not found"},
		{"resume_run", map[string]any{"interrupt_id": "00000000-0000-0000-0000-000000000000"}, "value is required"},
		{"cancel_run", map[string]any{"run_id": "nope"}, "not found"},
		{"export_node_workspace", map[string]any{"run_id": "nope", "node": "first"}, "not found"},
		{"export_node_workspace", map[string]any{"run_id": "nope", "node": "first", "format": "zip"}, `format "zip" is not one of bundle, tar`},
	} {
		if msg := b.toolError(t, tc.tool, tc.args); !strings.Contains(msg, tc.want) {
			t.Errorf("%s %v: %q does not say %q", tc.tool, tc.args, msg, tc.want)
		}
	}
}
