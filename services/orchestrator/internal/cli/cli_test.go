package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/pflag"

	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const token = "tester-token-0123456789"

// env is a fake environment.
type env map[string]string

func (e env) get(k string) string { return e[k] }

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// parseServe parses serve's flags and resolves its settings as the command
// does, without running it.
func parseServe(t *testing.T, args []string, e env) (serveConfig, error) {
	t.Helper()
	var cfg serveConfig
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.bindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	return cfg, resolveSettings(fs, e.get)
}

func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "orchestrator.yaml", `
addr: 127.0.0.1:1
lease_ttl: 40s
max-workers: 7
migrate: false
replica_id: from-file
mesh_url: http://file/mcp
`)
	cfg, err := parseServe(t, []string{"--max-workers", "9", "--config", file}, env{
		"ORCHESTRATOR_ADDR":        "127.0.0.1:2",
		"ORCHESTRATOR_REPLICA_ID":  "from-env",
		"ORCHESTRATOR_MAX_WORKERS": "8",
		"ORCHESTRATOR_ADMINS":      "root,ops",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := serveConfig{
		Admins: []string{"root", "ops"}, Console: true,
		Addr: "127.0.0.1:2", ReplicaID: "from-env", // env over file
		MaxWorkers: 9,                                                            // flag over env and file
		LeaseTTL:   40 * time.Second, Migrate: false, MeshURL: "http://file/mcp", // file over default
		ShutdownTimeout: 30 * time.Second, // default
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("resolved\n%+v\nwant\n%+v", cfg, want)
	}

	// The config file can come from the environment too.
	cfg, err = parseServe(t, nil, env{"ORCHESTRATOR_CONFIG": file})
	if err != nil || cfg.Addr != "127.0.0.1:1" || cfg.MaxWorkers != 7 {
		t.Errorf("config from ORCHESTRATOR_CONFIG: %+v, %v", cfg, err)
	}
	cfg, err = parseServe(t, nil, env{})
	if err != nil || cfg.Addr != ":8090" || !cfg.Migrate || cfg.LeaseTTL != 15*time.Second || cfg.MaxWorkers != 50 {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}

	for _, tc := range []struct {
		name, file string
		env        env
		want       string
	}{
		{"unknown key", "adddr: x\n", nil, `unknown key "adddr"`},
		{"not a scalar", "addr: [a, b]\n", nil, "single value"},
		{"bad file value", "lease_ttl: soon\n", nil, `lease_ttl: "soon": not a duration`},
		{"bad env value", "", env{"ORCHESTRATOR_MAX_WORKERS": "many"}, `ORCHESTRATOR_MAX_WORKERS="many": not a whole number`},
		{"not a boolean", "", env{"ORCHESTRATOR_API_ONLY": "yes"}, `ORCHESTRATOR_API_ONLY="yes": not a boolean`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{}
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, "c.yaml", tc.file))
			}
			_, err := parseServe(t, args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// lines is a log destination that hands each line to the test.
type lines chan string

func (l lines) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		select {
		case l <- line:
		default: // the test stopped listening
		}
	}
	return len(p), nil
}

// waitLog waits for a log line with msg and returns it decoded.
func waitLog(t *testing.T, logs lines, msg string) map[string]any {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line := <-logs:
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q is not JSON: %v", line, err)
			}
			if rec["msg"] == msg {
				return rec
			}
		case <-timeout:
			t.Fatalf("no %q log line", msg)
		}
	}
}

// The serve command end to end, on an empty database it migrates: it logs
// its real address, serves the API with the tokens of the environment, and
// stops when its context ends.
//
// Not parallel: serve installs the global OpenTelemetry providers, which
// another serve or mcp command would replace (and stop) under it, and the
// runs' trace ids come from them.
func TestServe(t *testing.T) {
	dir := pipelinesDir(t)
	logs := make(lines, 1000)
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	collector := telemetrytest.NewCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // telemetry reads the process environment
	cmd := newServeCommand(logger, env{
		"DATABASE_URL":        pgtest.EmptyDSN(t),
		"ORCHESTRATOR_TOKENS": "tester=" + token,
		"ORCHESTRATOR_ADDR":   "127.0.0.1:0",
	}.get)
	cmd.SetArgs([]string{"--pipelines", dir, "--replica-id", "r1", "--shutdown-timeout", "5s"})
	ctx, cancel := context.WithCancel(context.Background())
	done, exited := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(exited)
		done <- cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
	})

	serving := waitLog(t, logs, "serving")
	addr, _ := serving["addr"].(string)
	if !strings.HasPrefix(addr, "127.0.0.1:") || addr == "127.0.0.1:0" || !strings.HasPrefix(serving["replica"].(string), "r1") {
		t.Fatalf("serving line %v: want the real address", serving)
	}
	base := "http://" + addr
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/v1/pipelines": 401} {
		if code, body := get(path, ""); code != want {
			t.Errorf("%s: %d %s, want %d", path, code, body, want)
		}
	}
	if code, body := get("/v1/pipelines", token); code != 200 || !strings.Contains(body, `"echo"`) {
		t.Fatalf("pipelines: %d %s", code, body)
	}

	// The MCP tools at /mcp are stateless: no session to keep, none to
	// time out.
	mctx, mcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer mcancel()
	session := mcptest.Connect(t, base+"/mcp", token, nil)
	res, err := session.CallTool(mctx, &mcp.CallToolParams{Name: "list_pipelines", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("list_pipelines over HTTP: %+v, %v", res, err)
	}
	if id := session.ID(); id != "" {
		t.Errorf("the MCP session has id %q; want a stateless server (none)", id)
	}
	_ = session.Close()
	if code, _ := get("/mcp", token); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /mcp: %d; want 405 (no server-to-client stream)", code)
	}

	// No executor is configured: the run's first node fails, and says why.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/runs", strings.NewReader(`{"pipeline":"echo","inputs":{"task":"x"}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var run api.Run
	_ = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || run.Caller != "tester" {
		t.Fatalf("start: %d %+v", resp.StatusCode, run)
	}
	req, _ = http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/v1/runs/"+run.ID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	last := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			last = sc.Text()
		}
	}
	resp.Body.Close()
	if !strings.Contains(last, `"status":"failed"`) || !strings.Contains(last, "executor not configured: role a works via mesh; start the orchestrator with --mesh-url") {
		t.Errorf("last event %s: want the run failed for want of a mesh executor", last)
	}

	// The run is in the trace of the request that started it (spans are
	// recorded with no collector too), and its node's outcome is counted.
	if len(run.TraceID) != 32 {
		t.Errorf("started run's trace_id %q, want 32 hex digits", run.TraceID)
	}
	if code, body := get("/v1/runs/"+run.ID, token); code != 200 || !strings.Contains(body, `"trace_id":"`+run.TraceID+`"`) {
		t.Errorf("GET the run: %d %s; want its trace_id %s", code, body, run.TraceID)
	}
	if _, body := get("/metrics", ""); !strings.Contains(body, `meshwork_node_duration_seconds_count{node="first",outcome="failed",pipeline="echo"} 1`) {
		t.Errorf("/metrics lacks the failed node's duration:\n%s", body)
	}
	// The image's health check: the binary probes itself.
	root := NewRoot(slog.New(slog.DiscardHandler))
	root.SetArgs([]string{"healthcheck", base + "/healthz"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Errorf("healthcheck: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	waitLog(t, logs, "stopped")
	// The last export, on the way out, could still count the runs: the
	// telemetry was flushed before the pool closed.
	if ok, found := collector.LastGauge("orchestrator_runs_scrape_ok"); !found || ok != 1 {
		t.Errorf("the last OTLP export's orchestrator_runs_scrape_ok: %v (found: %v), want 1", ok, found)
	}
}

// The pool has --max-workers + 10 connections, unless DATABASE_URL says.
func TestPoolConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn      string
		maxConns int32
		want     int32
	}{
		{"postgres://u:p@localhost:5432/db?sslmode=disable", 60, 60},
		{"postgres://u:p@localhost:5432/db?sslmode=disable&pool_max_conns=7", 60, 7},
		{"postgresql://localhost/db?pool_max_conns=3", 60, 3},
		{"host=localhost dbname=db pool_max_conns=5", 60, 5},
		{"host=localhost dbname=db pool_max_conns = 6", 60, 6},
		{"host=localhost dbname=db", 11, 11},
		{"host=localhost dbname=db application_name=not_pool_max_conns", 11, 11},
	} {
		pc, err := poolConfig(tc.dsn, tc.maxConns)
		if err != nil {
			t.Errorf("%s: %v", tc.dsn, err)
			continue
		}
		if pc.MaxConns != tc.want {
			t.Errorf("%s: MaxConns %d; want %d", tc.dsn, pc.MaxConns, tc.want)
		}
	}
	pc, err := poolConfig("postgres://localhost/db", 0)
	if err != nil || pc.MaxConns < 4 {
		t.Errorf("no maximum asked: %+v, %v; want pgx's default", pc, err)
	}
	if _, err := poolConfig("postgres://u:secret@localhost:99999999/db", 5); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad DSN: %v", err)
	}
}

func TestServeRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  env
		args []string
		want string
	}{
		{"no tokens", env{"DATABASE_URL": "postgres://x"}, nil, "ORCHESTRATOR_TOKENS"},
		{"short token", env{"ORCHESTRATOR_TOKENS": "a=short"}, nil, "16"},
		{"no database", env{"ORCHESTRATOR_TOKENS": "tester=" + token}, nil, "DATABASE_URL"},
		{"mesh url without its token", env{"ORCHESTRATOR_TOKENS": "tester=" + token, "DATABASE_URL": pgtest.DSN(t)}, []string{"--mesh-url", "http://127.0.0.1:1/mcp", "--migrate=false"}, "MESH_EXEC_TOKEN"},
		{"bad pipelines", env{"ORCHESTRATOR_TOKENS": "tester=" + token}, []string{"--pipelines", t.TempDir()}, "no pipelines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := newServeCommand(slog.New(slog.DiscardHandler), tc.env.get)
			cmd.SetArgs(tc.args)
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// orchestrator mcp serves the tools over stdio, as an API-only engine.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	eb := enginetest.Start(t) // migrates the database; its engine works nothing here
	outR, inW, done := startMCPStdio(eb.DSN, pipelinesDir(t))

	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session, err := client.Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "run_pipeline", Arguments: map[string]any{"pipeline": "echo", "inputs": map[string]any{"task": "x"}}})
	if err != nil || res.IsError {
		t.Fatalf("run_pipeline: %v %+v", err, res)
	}
	data, _ := json.Marshal(res.StructuredContent)
	var run api.Run
	if err := json.Unmarshal(data, &run); err != nil || run.Caller != "dana" {
		t.Errorf("run %s: want started by dana", data)
	}
	res, err = session.CallTool(ctx, &mcp.CallToolParams{Name: "get_run", Arguments: map[string]any{"run_id": "nope"}})
	if err != nil || !res.IsError {
		t.Errorf("get_run of nothing: %v %+v, want a tool error", err, res)
	}
	_ = session.Close()
	_ = inW.Close()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("mcp returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("mcp did not stop when its client left")
	}
}

// pipelinesDir writes the test pipelines (enginetest.Pipelines) to a
// directory of the test's own, for --pipelines.
func pipelinesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, f := range enginetest.Pipelines {
		if err := os.WriteFile(filepath.Join(dir, name), f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startMCPStdio runs orchestrator mcp over stdio on dsn's database with the
// pipelines in dir, as the caller dana, the way a client starts it as a
// subprocess. It returns the command's stdout and stdin, and its result,
// sent once it returns and has closed its stdout; closing stdin ends it.
func startMCPStdio(dsn, dir string) (stdout *io.PipeReader, stdin *io.PipeWriter, done <-chan error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	cmd := newMCPCommand(slog.New(slog.DiscardHandler), env{"DATABASE_URL": dsn, "ORCHESTRATOR_CALLER": "dana"}.get)
	cmd.SetArgs([]string{"--transport", "stdio", "--pipelines", dir})
	cmd.SetIn(inR)
	cmd.SetOut(outW)
	result := make(chan error, 1)
	go func() {
		err := cmd.ExecuteContext(context.Background())
		_ = outW.Close()
		result <- err
	}()
	return outR, inW, result
}
