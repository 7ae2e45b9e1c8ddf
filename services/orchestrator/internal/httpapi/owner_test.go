package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// A run belongs to the caller that started it: another caller can neither
// see, list, fork, approve, resume nor cancel it, over the API or the MCP
// tools, and is told "not found" as for a run that does not exist; nor can
// it take the run's thread (its role sessions). An admin sees and decides
// it.
func TestRunsBelongToTheirCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var run api.Run
	b.call(t, http.MethodPost, "/v1/runs", map[string]any{"pipeline": "approval", "thread": "alice-thread"}, http.StatusCreated, &run)
	v := b.settle(t, run.ID)
	if v.Status != runstate.RunWaiting || len(v.Interrupts) != 1 {
		t.Fatalf("run %s with %d interrupts; want waiting on one", v.Status, len(v.Interrupts))
	}
	interrupt := v.Interrupts[0].ID

	// The API, as bob.
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/v1/runs/" + run.ID},
		{http.MethodGet, "/v1/runs/" + run.ID + "/checkpoints"},
		{http.MethodGet, "/v1/runs/" + run.ID + "/events"},
		{http.MethodPost, "/v1/runs/" + run.ID + "/fork"},
		{http.MethodPost, "/v1/runs/" + run.ID + "/cancel"},
		{http.MethodPost, "/v1/runs/" + run.ID + "/resume"},
		{http.MethodPost, "/v1/runs/" + run.ID + "/prune"},
		{http.MethodPost, "/v1/interrupts/" + interrupt + "/resume"},
		{http.MethodGet, "/v1/runs/" + run.ID + "/nodes/approve/workspace"},
	} {
		var body any
		switch r.path {
		case "/v1/runs/" + run.ID + "/fork":
			body = map[string]any{"seq": 0}
		case "/v1/runs/" + run.ID + "/prune":
			body = map[string]any{"keep": 1}
		case "/v1/interrupts/" + interrupt + "/resume":
			body = map[string]any{"value": "ship it"}
		}
		resp, data := b.do(t, r.method, r.path, bobToken, body)
		wantError(t, resp, data, http.StatusNotFound, meshapi.CodeNotFound)
	}
	var list struct {
		Runs []api.Run `json:"runs"`
	}
	resp, data := b.do(t, http.MethodGet, "/v1/runs", bobToken, nil)
	if err := json.Unmarshal(data, &list); err != nil || resp.StatusCode != http.StatusOK || len(list.Runs) != 0 {
		t.Errorf("bob lists %d %s; want no run", resp.StatusCode, data)
	}
	resp, data = b.do(t, http.MethodGet, "/v1/runs?caller=alice", bobToken, nil)
	if err := json.Unmarshal(data, &list); err != nil || resp.StatusCode != http.StatusOK || len(list.Runs) != 0 {
		t.Errorf("bob lists alice's runs: %d %s; want none", resp.StatusCode, data)
	}
	resp, data = b.do(t, http.MethodPost, "/v1/runs", bobToken, map[string]any{"pipeline": "approval", "thread": "alice-thread"})
	wantError(t, resp, data, http.StatusConflict, meshapi.CodeConflict)
	// To alice, the run is there, and its approval node has no workspace
	// (the export itself is tested on real parts in the engine's
	// TestCodingPipeline).
	resp, data = b.do(t, http.MethodGet, "/v1/runs/"+run.ID+"/nodes/approve/workspace?format=tar", aliceToken, nil)
	wantError(t, resp, data, http.StatusBadRequest, meshapi.CodeInvalidArgument)
	if !strings.Contains(string(data), "no workspace to export") {
		t.Errorf("alice's export of the approval node: %s", data)
	}

	// The MCP tools, as bob.
	bob := b.mcpClient(t, bobToken)
	for _, c := range []struct {
		tool string
		args map[string]any
		code meshapi.Code
	}{
		{"get_run", map[string]any{"run_id": run.ID}, meshapi.CodeNotFound},
		{"list_checkpoints", map[string]any{"run_id": run.ID}, meshapi.CodeNotFound},
		{"fork_run", map[string]any{"run_id": run.ID, "seq": 0}, meshapi.CodeNotFound},
		{"cancel_run", map[string]any{"run_id": run.ID}, meshapi.CodeNotFound},
		{"resume_run", map[string]any{"interrupt_id": interrupt, "value": "ship it"}, meshapi.CodeNotFound},
		{"run_pipeline", map[string]any{"pipeline": "approval", "thread": "alice-thread"}, meshapi.CodeConflict},
	} {
		res, err := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		if e, ok := meshapi.ErrorOf(res); !ok || e.Code != c.code {
			t.Errorf("bob's %s: %+v, want the code %s", c.tool, e, c.code)
		}
	}
	res, err := bob.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_runs", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("list_runs: %v %v", err, res)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Runs) != 0 {
		t.Errorf("bob's list_runs: %s; want no run", raw)
	}

	// The run is untouched, and root, an admin, sees it and lists it.
	if v := b.settle(t, run.ID); v.Status != runstate.RunWaiting || v.Interrupts[0].Status != "pending" {
		t.Errorf("after bob: run %s, interrupt %s; want both untouched", v.Status, v.Interrupts[0].Status)
	}
	resp, data = b.do(t, http.MethodGet, "/v1/runs", rootToken, nil)
	if err := json.Unmarshal(data, &list); err != nil || resp.StatusCode != http.StatusOK ||
		!slices.ContainsFunc(list.Runs, func(r api.Run) bool { return r.ID == run.ID }) {
		t.Errorf("root lists %d %s; want alice's run", resp.StatusCode, data)
	}
	root := b.mcpClient(t, rootToken)
	res, err = root.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_run", Arguments: map[string]any{"run_id": run.ID}})
	if err != nil || res.IsError {
		t.Errorf("root's get_run: %v %v", err, res)
	}
	// alice still decides her own approval.
	resp, data = b.do(t, http.MethodPost, "/v1/interrupts/"+interrupt+"/resume", aliceToken, map[string]any{"value": "ship it"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's decision: %d %s", resp.StatusCode, data)
	}
	if v := b.settle(t, run.ID); v.Status != runstate.RunSucceeded || v.Interrupts[0].DecidedBy != "alice" {
		t.Errorf("run %s decided by %q; want succeeded, by alice", v.Status, v.Interrupts[0].DecidedBy)
	}
}

// mcpClient connects to /mcp with a caller's token.
func (b *bundle) mcpClient(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	return mcptest.Connect(t, b.srv.URL+"/mcp", token, &mcptest.Options{Base: b.srv.Client().Transport})
}

// An approval node that names its approvers is decided by them alone: the
// run's own caller is refused (told who decides), a named approver who did
// not start the run decides it, and the decision records them.
func TestNamedApprovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var run api.Run
	b.call(t, http.MethodPost, "/v1/runs", map[string]any{"pipeline": "signoff"}, http.StatusCreated, &run)
	v := b.settle(t, run.ID)
	if v.Status != runstate.RunWaiting || len(v.Interrupts) != 1 {
		t.Fatalf("run %s with %d interrupts; want waiting on one", v.Status, len(v.Interrupts))
	}
	path := "/v1/interrupts/" + v.Interrupts[0].ID + "/resume"
	resp, data := b.do(t, http.MethodPost, path, aliceToken, map[string]any{"value": "mine"})
	if e := wantError(t, resp, data, http.StatusForbidden, meshapi.CodePermissionDenied); !strings.Contains(e.Message, "decided by bob") {
		t.Errorf("alice's refusal says %q, want who decides", e.Message)
	}
	alice := b.mcpClient(t, aliceToken)
	res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: "resume_run", Arguments: map[string]any{"interrupt_id": v.Interrupts[0].ID, "value": "mine"}})
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := meshapi.ErrorOf(res); !ok || e.Code != meshapi.CodePermissionDenied {
		t.Errorf("alice's resume_run: %+v, want permission_denied", e)
	}
	// While another run of alice's works on the thread, bob's decision,
	// which would set publish going, waits its turn; he is not told the
	// other run's id, which he cannot see.
	release := b.exec.Hold("draft")
	var other api.Run
	b.call(t, http.MethodPost, "/v1/runs", map[string]any{"pipeline": "approval", "thread": run.Thread}, http.StatusCreated, &other)
	resp, data = b.do(t, http.MethodPost, path, bobToken, map[string]any{"value": "signed off"})
	if e := wantError(t, resp, data, http.StatusConflict, meshapi.CodeConflict); strings.Contains(e.Message, other.ID) || !strings.Contains(e.Message, "another caller's run") {
		t.Errorf("bob's decision while alice's run %s works on the thread: %q; want a conflict that does not name it", other.ID, e.Message)
	}
	release()
	b.settle(t, other.ID)
	enginetest.WhileConflict(func() bool {
		resp, data = b.do(t, http.MethodPost, path, bobToken, map[string]any{"value": "signed off"})
		return resp.StatusCode == http.StatusConflict
	})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("bob's decision: %d %s", resp.StatusCode, data)
	}
	if v := b.settle(t, run.ID); v.Status != runstate.RunSucceeded || v.Interrupts[0].DecidedBy != "bob" || v.Outputs["publish"] != "a: publish with signed off" {
		t.Errorf("run %s, decided by %q, outputs %v; want succeeded, by bob", v.Status, v.Interrupts[0].DecidedBy, v.Outputs)
	}
}
