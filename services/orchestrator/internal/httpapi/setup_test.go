package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/mcptools"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The callers of the test server and their tokens.
const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
	rootToken  = "root-token-0123456789ab" // an admin
)

type bundle struct {
	api  *API
	srv  *httptest.Server
	eng  *engine.Engine
	exec *enginetest.InstantExecutor // setup's; nil for setupAPIOnly
}

// setup serves the API, with the MCP tools at /mcp, over an engine on a
// fresh database with the test pipelines.
func setup(t *testing.T) *bundle {
	t.Helper()
	eb := enginetest.Start(t)
	tokens, err := bearer.New(map[string]string{"alice": aliceToken, "bob": bobToken, "root": rootToken})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	reg.MustRegister(NewRunsCollector(eb.Pool))
	tools, err := mcptools.New(mcptools.Config{Engine: eb.Engine, Admins: []string{"root"}, OnRunStarted: func(r api.Run) { metrics.RunStarted(r.Pipeline, "mcp") }})
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(Config{
		Engine: eb.Engine, Tokens: tokens, Metrics: metrics, Gatherer: reg, Ready: eb.Pool.Ping, Admins: []string{"root"},
		MCP: mcptools.HTTPHandler(tools, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	b := serve(t, api, eb.Engine)
	b.exec = eb.Executor
	return b
}

// setupAPIOnly serves the API of cfg, as alice's, over an API-only engine
// (WorkDisabled) on a fresh database with the test pipelines: its runs
// never move past their start, so their event streams stay open.
func setupAPIOnly(t *testing.T, cfg Config) *bundle {
	t.Helper()
	eng, err := engine.New(engine.Config{Pool: pgtest.Pool(t), Catalog: enginetest.Catalog(t), WorkDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tokens, err = bearer.New(map[string]string{"alice": aliceToken}); err != nil {
		t.Fatal(err)
	}
	cfg.Engine = eng
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, api, eng)
}

// serve serves api on a test server until the test ends, then closes its
// event streams before the server, which waits for open requests.
func serve(t *testing.T, api *API, eng *engine.Engine) *bundle {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.CloseStreams()
		srv.Close()
	})
	return &bundle{api: api, srv: srv, eng: eng}
}

// startEcho starts a run of the echo pipeline as alice.
func (b *bundle) startEcho(t *testing.T) api.Run {
	t.Helper()
	var run api.Run
	b.call(t, http.MethodPost, "/v1/runs", map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "x"}}, http.StatusCreated, &run)
	return run
}

// do sends a request as the token's caller ("" for none); body is JSON
// unless it is a string, sent as is.
// response is what do kept of a response whose body it read and closed.
type response struct {
	StatusCode int
	Header     http.Header
}

func (b *bundle) do(t *testing.T, method, path, token string, body any) (*response, []byte) {
	t.Helper()
	var r io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		r = bytes.NewReader([]byte(v))
	default:
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.srv.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &response{StatusCode: resp.StatusCode, Header: resp.Header}, data
}

// get sends a GET as alice and returns the response with its body unread,
// for a stream the test reads as it comes; ctx ends the request.
func (b *bundle) get(ctx context.Context, t *testing.T, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// call sends a request as alice, checks the status and decodes the body
// into out (when not nil).
func (b *bundle) call(t *testing.T, method, path string, body any, wantStatus int, out any) {
	t.Helper()
	resp, data := b.do(t, method, path, aliceToken, body)
	if resp.StatusCode != wantStatus {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, wantStatus, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, data, err)
		}
	}
}

// wantError checks a JSON error response.
func wantError(t *testing.T, resp *response, data []byte, status int, code meshapi.Code) errorDetail {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var body errorBody
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("error body %s: %v", data, err)
	}
	if body.Error.Code != code || body.Error.Message == "" {
		t.Fatalf("error %+v, want code %s and a message", body.Error, code)
	}
	return body.Error
}

// settle waits until the run ends or waits for an approval (the engine's
// own signal), then returns it as GET /v1/runs/{id} shows it.
func (b *bundle) settle(t *testing.T, runID string) api.RunView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.eng.Watch(ctx, runID, -1, func(engine.Event) error { return nil }); err != nil {
		t.Fatalf("watching run %s: %v", runID, err)
	}
	var v api.RunView
	b.call(t, http.MethodGet, "/v1/runs/"+runID, nil, http.StatusOK, &v)
	return v
}
