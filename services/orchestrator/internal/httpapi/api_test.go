package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ name, method, path, header string }{
		{"no token", http.MethodGet, "/v1/pipelines", ""},
		{"wrong token", http.MethodGet, "/v1/pipelines", "Bearer not-a-token-of-anyone"},
		{"not bearer", http.MethodGet, "/v1/runs", "Basic " + aliceToken},
		{"unknown path", http.MethodGet, "/v1/nowhere", ""},
		{"mcp", http.MethodPost, "/mcp", ""},
		{"mcp wrong token", http.MethodPost, "/mcp", "Bearer " + aliceToken + "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(context.Background(), tc.method, b.srv.URL+tc.path, strings.NewReader("{}"))
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := b.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body errorBody
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || body.Error.Code != meshapi.CodeUnauthenticated {
				t.Fatalf("status %d, error %+v; want 401 unauthorized", resp.StatusCode, body.Error)
			}
			if !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("WWW-Authenticate %q", resp.Header.Get("WWW-Authenticate"))
			}
			if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff", got)
			}
		})
	}
	t.Run("health needs no token", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			if resp, data := b.do(t, http.MethodGet, path, "", nil); resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %d %s", path, resp.StatusCode, data)
			}
		}
	})
	t.Run("each token is its caller", func(t *testing.T) {
		for token, caller := range map[string]string{aliceToken: "alice", bobToken: "bob"} {
			resp, data := b.do(t, http.MethodPost, "/v1/runs", token, map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "x"}})
			var run api.Run
			if resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &run) != nil || run.Caller != caller {
				t.Errorf("run by %s: %d %s", caller, resp.StatusCode, data)
			}
		}
	})
}

// A run from start to finish: started, read back with its outputs, listed,
// its checkpoints listed, forked, pruned.
func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)

	var pl struct{ Pipelines []api.PipelineSummary }
	b.call(t, http.MethodGet, "/v1/pipelines", nil, http.StatusOK, &pl)
	if len(pl.Pipelines) != 3 || pl.Pipelines[1].Name != "echo" || !pl.Pipelines[1].Inputs["task"].Required || pl.Pipelines[1].Hash == "" {
		t.Fatalf("pipelines %+v", pl.Pipelines)
	}

	resp, data := b.do(t, http.MethodPost, "/v1/runs", aliceToken, map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "hi"}, "thread": "t1"})
	var run api.Run
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &run) != nil {
		t.Fatalf("start: %d %s", resp.StatusCode, data)
	}
	if resp.Header.Get("Location") != "/v1/runs/"+run.ID || run.Thread != "t1" || run.Caller != "alice" || run.Pipeline != "echo" {
		t.Errorf("started run %+v, Location %q", run, resp.Header.Get("Location"))
	}
	v := b.settle(t, run.ID)
	if v.Status != runstate.RunSucceeded {
		t.Fatalf("run %s: %s", v.Status, v.Error)
	}
	if got, want := v.Outputs["second"], "b: second: a: first: hi"; got != want {
		t.Errorf("second's output %q, want %q", got, want)
	}
	if v.Inputs["tone"] != "plain" || len(v.Nodes) != 2 || v.Sessions["a"] == "" {
		t.Errorf("run view %+v", v)
	}

	var list struct{ Runs []api.Run }
	b.call(t, http.MethodGet, "/v1/runs?pipeline=echo&status=succeeded&thread=t1&limit=10", nil, http.StatusOK, &list)
	if len(list.Runs) != 1 || list.Runs[0].ID != run.ID {
		t.Errorf("listed %+v", list.Runs)
	}
	b.call(t, http.MethodGet, "/v1/runs?pipeline=approval", nil, http.StatusOK, &list)
	if len(list.Runs) != 0 {
		t.Errorf("approval runs %+v, want none", list.Runs)
	}
	b.call(t, http.MethodGet, "/v1/runs?before="+run.ID, nil, http.StatusOK, &list)
	if len(list.Runs) != 0 {
		t.Errorf("runs before the only one: %+v", list.Runs)
	}

	var cps struct{ Checkpoints []store.Checkpoint }
	b.call(t, http.MethodGet, "/v1/runs/"+run.ID+"/checkpoints", nil, http.StatusOK, &cps)
	var nodes []string
	for _, c := range cps.Checkpoints {
		nodes = append(nodes, c.NodeID)
	}
	if fmt.Sprint(nodes) != "[ first second]" {
		t.Fatalf("checkpoints by node %q", nodes)
	}

	// Fork after first, with second run again under a new input.
	var fork api.Run
	b.call(t, http.MethodPost, "/v1/runs/"+run.ID+"/fork", map[string]any{
		"seq":   1,
		"patch": map[string]any{"inputs": map[string]any{"task": "changed"}},
	}, http.StatusCreated, &fork)
	if fork.ForkedFromRun != run.ID || fork.ForkedFromSeq == nil || *fork.ForkedFromSeq != 1 || fork.Caller != "alice" {
		t.Errorf("fork %+v", fork)
	}
	fv := b.settle(t, fork.ID)
	if fv.Status != runstate.RunSucceeded || fv.Outputs["first"] != "a: first: hi" || fv.Outputs["second"] != "b: second: a: first: hi" || fv.Inputs["task"] != "changed" {
		t.Errorf("fork ended %s with outputs %v, inputs %v", fv.Status, fv.Outputs, fv.Inputs)
	}

	var pruned struct{ Deleted int }
	b.call(t, http.MethodPost, "/v1/runs/"+run.ID+"/prune", map[string]any{"keep": 1}, http.StatusOK, &pruned)
	if pruned.Deleted != 2 {
		t.Errorf("pruned %d, want 2", pruned.Deleted)
	}
	// Every state stays reachable: the fork still reads.
	b.call(t, http.MethodGet, "/v1/runs/"+fork.ID, nil, http.StatusOK, &fv)
	if fv.Outputs["second"] == "" {
		t.Errorf("the fork lost its state after the prune: %+v", fv)
	}

	// A finished run cannot be cancelled or resumed.
	resp, data = b.do(t, http.MethodPost, "/v1/runs/"+run.ID+"/cancel", aliceToken, nil)
	wantError(t, resp, data, http.StatusConflict, meshapi.CodeConflict)
	resp, data = b.do(t, http.MethodPost, "/v1/runs/"+run.ID+"/resume", aliceToken, map[string]any{"migrate": false})
	wantError(t, resp, data, http.StatusConflict, meshapi.CodeConflict)
}

// An approval parks the run; resuming its interrupt over HTTP continues it
// and records the decision and who made it.
func TestApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var run api.Run
	b.call(t, http.MethodPost, "/v1/runs", map[string]any{"pipeline": "approval"}, http.StatusCreated, &run)
	v := b.settle(t, run.ID)
	if v.Status != runstate.RunWaiting || len(v.Interrupts) != 1 || v.Interrupts[0].Status != "pending" {
		t.Fatalf("run %s, interrupts %+v; want waiting on one", v.Status, v.Interrupts)
	}
	id := v.Interrupts[0].ID

	// root, an admin, decides alice's approval.
	resp, data := b.do(t, http.MethodPost, "/v1/interrupts/"+id+"/resume", rootToken, map[string]any{"value": "ship it"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume: %d %s", resp.StatusCode, data)
	}
	v = b.settle(t, run.ID)
	if v.Status != runstate.RunSucceeded || v.Outputs["publish"] != "a: publish with ship it" {
		t.Fatalf("run %s, outputs %v", v.Status, v.Outputs)
	}
	if in := v.Interrupts[0]; in.Status != "resumed" || in.DecidedBy != "root" || string(in.Value) != `"ship it"` {
		t.Errorf("interrupt %+v: want resumed by root with \"ship it\"", in)
	}

	resp, data = b.do(t, http.MethodPost, "/v1/interrupts/"+id+"/resume", aliceToken, map[string]any{"value": "again"})
	wantError(t, resp, data, http.StatusConflict, meshapi.CodeConflict)
	resp, data = b.do(t, http.MethodPost, "/v1/interrupts/00000000-0000-0000-0000-000000000000/resume", aliceToken, map[string]any{"value": "x"})
	wantError(t, resp, data, http.StatusNotFound, meshapi.CodeNotFound)
	resp, data = b.do(t, http.MethodPost, "/v1/interrupts/not-an-id/resume", aliceToken, map[string]any{"value": true})
	wantError(t, resp, data, http.StatusNotFound, meshapi.CodeNotFound)

	// A structured decision and a cancel, on a second run.
	b.call(t, http.MethodPost, "/v1/runs", map[string]any{"pipeline": "approval"}, http.StatusCreated, &run)
	v = b.settle(t, run.ID)
	resp, data = b.do(t, http.MethodPost, "/v1/interrupts/"+v.Interrupts[0].ID+"/resume", aliceToken, map[string]any{"value": nil})
	wantError(t, resp, data, http.StatusBadRequest, meshapi.CodeInvalidArgument)
	b.call(t, http.MethodPost, "/v1/runs/"+run.ID+"/cancel", nil, http.StatusOK, &run)
	if run.Status != runstate.RunCancelled {
		t.Errorf("cancelled run is %s", run.Status)
	}
	resp, data = b.do(t, http.MethodPost, "/v1/interrupts/"+v.Interrupts[0].ID+"/resume", aliceToken, map[string]any{"value": map[string]any{"ok": true}})
	wantError(t, resp, data, http.StatusConflict, meshapi.CodeConflict)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.startEcho(t)

	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		code               meshapi.Code
		message            string
	}{
		{"unknown pipeline", "POST", "/v1/runs", map[string]any{"pipeline": "nope"}, 404, meshapi.CodeNotFound, `pipeline "nope"`},
		{"no pipeline", "POST", "/v1/runs", map[string]any{}, 400, meshapi.CodeInvalidArgument, "pipeline is required"},
		{"missing required input", "POST", "/v1/runs", map[string]any{"pipeline": "echo"}, 400, meshapi.CodeInvalidArgument, "task"},
		{"wrong input type", "POST", "/v1/runs", map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": 3}}, 400, meshapi.CodeInvalidArgument, "task"},
		{"bad JSON", "POST", "/v1/runs", `{"pipeline": "echo",`, 400, meshapi.CodeInvalidArgument, "the JSON ends too early"},
		{"malformed JSON", "POST", "/v1/runs", "{\n  \"pipeline\" 1}", 400, meshapi.CodeInvalidArgument, "line 2, column"},
		{"unknown field", "POST", "/v1/runs", `{"pipeline": "echo", "input": {}}`, 400, meshapi.CodeInvalidArgument, `unknown field "input"`},
		{"caller is not a field", "POST", "/v1/runs", `{"pipeline": "echo", "caller": "mallory"}`, 400, meshapi.CodeInvalidArgument, `unknown field "caller"`},
		{"wrong field type", "POST", "/v1/runs", `{"pipeline": 7}`, 400, meshapi.CodeInvalidArgument, "field pipeline must be a string"},
		{"two values", "POST", "/v1/runs", `{"pipeline": "echo"} {}`, 400, meshapi.CodeInvalidArgument, "one JSON object"},
		{"not an object", "POST", "/v1/runs", `[1]`, 400, meshapi.CodeInvalidArgument, "want a JSON object"},
		{"empty body", "POST", "/v1/runs", nil, 400, meshapi.CodeInvalidArgument, "empty"},
		{"too large", "POST", "/v1/runs", `{"pipeline": "` + strings.Repeat("x", MaxBodyBytes) + `"}`, 413, codeTooLarge, "larger"},
		{"bad thread", "POST", "/v1/runs", map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "x"}, "thread": "a\nb"}, 400, meshapi.CodeInvalidArgument, "thread"},
		{"unknown run", "GET", "/v1/runs/00000000-0000-0000-0000-000000000000", nil, 404, meshapi.CodeNotFound, "not found"},
		{"malformed run id", "GET", "/v1/runs/nope", nil, 404, meshapi.CodeNotFound, "not found"},
		{"checkpoints of unknown run", "GET", "/v1/runs/nope/checkpoints", nil, 404, meshapi.CodeNotFound, "not found"},
		{"bad status filter", "GET", "/v1/runs?status=done", nil, 400, meshapi.CodeInvalidArgument, "status"},
		{"bad limit", "GET", "/v1/runs?limit=0", nil, 400, meshapi.CodeInvalidArgument, "limit"},
		{"limit past the most", "GET", "/v1/runs?limit=1001", nil, 400, meshapi.CodeInvalidArgument, "limit 1001 is not from 1 to 1000"},
		{"bad before", "GET", "/v1/runs?before=nope", nil, 400, meshapi.CodeInvalidArgument, "before"},
		{"fork without seq", "POST", "/v1/runs/" + run.ID + "/fork", map[string]any{}, 400, meshapi.CodeInvalidArgument, "seq is required"},
		{"fork of unknown checkpoint", "POST", "/v1/runs/" + run.ID + "/fork", map[string]any{"seq": 99}, 404, meshapi.CodeNotFound, "checkpoint 99"},
		{"fork patch of unknown node", "POST", "/v1/runs/" + run.ID + "/fork", map[string]any{"seq": 0, "patch": map[string]any{"nodes": map[string]any{"zzz": map[string]any{"status": "pending"}}}}, 400, meshapi.CodeInvalidArgument, "zzz"},
		{"fork patch with unknown field", "POST", "/v1/runs/" + run.ID + "/fork", `{"seq": 0, "patch": {"nodez": {}}}`, 400, meshapi.CodeInvalidArgument, "nodez"},
		{"prune without keep", "POST", "/v1/runs/" + run.ID + "/prune", map[string]any{}, 400, meshapi.CodeInvalidArgument, "keep is required"},
		{"prune keep 0", "POST", "/v1/runs/" + run.ID + "/prune", map[string]any{"keep": 0}, 400, meshapi.CodeInvalidArgument, "keep"},
		{"resume without value", "POST", "/v1/interrupts/00000000-0000-0000-0000-000000000000/resume", map[string]any{}, 400, meshapi.CodeInvalidArgument, "value is required"},
		{"cancel with a body", "POST", "/v1/runs/" + run.ID + "/cancel", `{"why": "x"}`, 400, meshapi.CodeInvalidArgument, "unknown field"},
		{"events after", "GET", "/v1/runs/" + run.ID + "/events?after=x", nil, 400, meshapi.CodeInvalidArgument, "after"},
		{"events after beyond int32", "GET", "/v1/runs/" + run.ID + "/events?after=2147483648", nil, 400, meshapi.CodeInvalidArgument, "after"},
		{"fork seq beyond int32", "POST", "/v1/runs/" + run.ID + "/fork", map[string]any{"seq": int64(1) << 31}, 400, meshapi.CodeInvalidArgument, "seq"},
		{"fork seq negative", "POST", "/v1/runs/" + run.ID + "/fork", map[string]any{"seq": -1}, 400, meshapi.CodeInvalidArgument, "seq"},
		{"prune keep beyond int32", "POST", "/v1/runs/" + run.ID + "/prune", map[string]any{"keep": int64(1) << 31}, 400, meshapi.CodeInvalidArgument, "keep"},
		{"NUL in thread", "POST", "/v1/runs", map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "x"}, "thread": "a\x00b"}, 400, meshapi.CodeInvalidArgument, "thread"},
		{"NUL in fork thread", "POST", "/v1/runs/" + run.ID + "/fork", map[string]any{"seq": 0, "thread": "\x00"}, 400, meshapi.CodeInvalidArgument, "thread"},
		{"NUL in pipeline filter", "GET", "/v1/runs?pipeline=echo%00", nil, 400, meshapi.CodeInvalidArgument, "pipeline"},
		{"NUL in status filter", "GET", "/v1/runs?status=%00", nil, 400, meshapi.CodeInvalidArgument, "status"},
		{"NUL in thread filter", "GET", "/v1/runs?thread=%00t", nil, 400, meshapi.CodeInvalidArgument, "thread"},
		{"NUL in caller filter", "GET", "/v1/runs?caller=alice%00", nil, 400, meshapi.CodeInvalidArgument, "caller"},
		{"NUL in before", "GET", "/v1/runs?before=" + run.ID + "%00", nil, 400, meshapi.CodeInvalidArgument, "before"},
		{"no such route", "GET", "/v1/run", nil, 404, meshapi.CodeNotFound, "no such path"},
		{"wrong method", "DELETE", "/v1/runs", nil, 405, codeMethodNotAllowed, "not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, data := b.do(t, tc.method, tc.path, aliceToken, tc.body)
			e := wantError(t, resp, data, tc.status, tc.code)
			if !strings.Contains(e.Message, tc.message) {
				t.Errorf("message %q does not say %q", e.Message, tc.message)
			}
		})
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, event string
	data      []byte
}

// readEvents reads a stream to its end.
func readEvents(t *testing.T, b *bundle, path string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, b.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = []byte(strings.TrimPrefix(line, "data: "))
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.startEcho(t)

	events := readEvents(t, b, "/v1/runs/"+run.ID+"/events?after=-1")
	var seqs []int
	var last engine.Event
	for i, e := range events {
		var ev engine.Event
		if err := json.Unmarshal(e.data, &ev); err != nil || ev.Type != e.event || ev.RunID != run.ID {
			t.Fatalf("event %d: %s %s (%v)", i, e.event, e.data, err)
		}
		if ev.Type == "checkpoint" {
			if e.id != fmt.Sprint(ev.Seq) {
				t.Errorf("checkpoint %d has event id %q", ev.Seq, e.id)
			}
			seqs = append(seqs, ev.Seq)
		}
		if ev.Type == "run" && i != len(events)-1 {
			t.Errorf("run event %d is not the last of %d", i, len(events))
		}
		last = ev
	}
	if fmt.Sprint(seqs) != "[0 1 2]" {
		t.Errorf("checkpoint seqs %v, want [0 1 2]", seqs)
	}
	if last.Type != "run" || last.Status != runstate.RunSucceeded {
		t.Errorf("last event %+v, want the run succeeded", last)
	}

	// Resuming after a checkpoint skips the checkpoints before.
	seqs = nil
	events = readEvents(t, b, "/v1/runs/"+run.ID+"/events?after=1")
	for _, e := range events {
		if e.event == "checkpoint" {
			seqs = append(seqs, atoi(t, e.id))
		}
	}
	if fmt.Sprint(seqs) != "[2]" || events[len(events)-1].event != "run" {
		t.Errorf("checkpoints after 1: %v, last event %s", seqs, events[len(events)-1].event)
	}

	resp, data := b.do(t, http.MethodGet, "/v1/runs/00000000-0000-0000-0000-000000000000/events", aliceToken, nil)
	wantError(t, resp, data, http.StatusNotFound, meshapi.CodeNotFound)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	run := b.startEcho(t)
	b.settle(t, run.ID)
	// Methods are counted before routing and authentication: one that is
	// not standard is OTHER, not a series of its own.
	for _, m := range []string{"FOOBAR", "BREW", "PROPFIND"} {
		b.do(t, m, "/v1/runs", "", nil)
	}
	b.do(t, http.MethodOptions, "/v1/runs", "", nil)
	_, data := b.do(t, http.MethodGet, "/metrics", "", nil)
	for _, bad := range []string{"FOOBAR", "BREW", "PROPFIND"} {
		if strings.Contains(string(data), bad) {
			t.Errorf("metrics have a series of method %s", bad)
		}
	}
	for _, want := range []string{
		`orchestrator_http_requests_total{code="405",method="OTHER",route="unmatched"} 3`,
		`method="OPTIONS"`, // a standard method is its own label
		`orchestrator_http_requests_total{code="201",method="POST",route="/v1/runs"} 1`,
		`orchestrator_http_requests_total{code="200",method="GET",route="/v1/runs/{id}"} 1`,
		`orchestrator_runs_started_total{pipeline="echo",surface="http"} 1`,
		`orchestrator_runs{pipeline="echo",status="succeeded"} 1`,
		`orchestrator_runs_scrape_ok 1`,
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("metrics lack %s:\n%s", want, data)
		}
	}
}

// Every route is documented in openapi.yaml, and every documented operation
// is routed.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var routed []string
	err := chi.Walk(b.api.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed = append(routed, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI    string                                `json:"openapi"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []meshapi.Code `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	b.call(t, http.MethodGet, "/v1/openapi.json", nil, http.StatusOK, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	// The codes the API sends are documented, and are the MCP tools' codes
	// where the two mean the same.
	documentedCodes := doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum
	for _, c := range []meshapi.Code{
		meshapi.CodeInvalidArgument, meshapi.CodeNotFound, meshapi.CodeConflict, meshapi.CodePipelineChanged,
		meshapi.CodePermissionDenied, meshapi.CodeUnauthenticated, meshapi.CodeUnavailable, meshapi.CodeResourceExhausted, meshapi.CodeInternal,
		codeMethodNotAllowed, codeTooLarge,
	} {
		if !slices.Contains(documentedCodes, c) {
			t.Errorf("error code %q is not in openapi.yaml's enum %v", c, documentedCodes)
		}
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	slices.Sort(routed)
	slices.Sort(documented)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.yaml", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("openapi.yaml documents %s, which is not routed", d)
		}
	}
	if len(routed) < 15 {
		t.Errorf("only %d routes walked: %v", len(routed), routed)
	}
}

// CloseStreams (the server shutting down) ends open event streams with an
// unavailable error event, which tells clients to reconnect.
func TestEventsEndOnShutdown(t *testing.T) {
	t.Parallel()
	// An API-only engine: the run never moves past its start.
	b := setupAPIOnly(t, Config{})
	run := b.startEcho(t)

	resp := b.get(context.Background(), t, "/v1/runs/"+run.ID+"/events")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "event: checkpoint" {
			b.api.CloseStreams() // after the first event: the stream is open
		}
	}
	got := strings.Join(lines, "\n")
	if !strings.Contains(got, "event: error\ndata: {\"error\":{\"code\":\"unavailable\"") {
		t.Errorf("stream:\n%s\nwant it to end with an unavailable error event", got)
	}
}
