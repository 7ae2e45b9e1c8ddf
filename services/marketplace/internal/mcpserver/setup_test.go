package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/egress"
	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
	"github.com/meshwork/meshwork/services/marketplace/internal/mcpserver"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker"
	"github.com/meshwork/meshwork/workers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Tokens of the two test callers.
const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef00"
)

// countingRuntime records Exec calls: the seam where "the worker saw no
// call" is observable. Everything else goes to the real workerruntime.
type countingRuntime struct {
	workerruntime.Runtime
	execs  atomic.Int64
	states atomic.Int64
	// failRemoves is how many Removes from now fail, doing nothing: an
	// engine that would not remove a worker.
	failRemoves atomic.Int64
}

func (c *countingRuntime) Remove(ctx context.Context, h workerruntime.Handle, opts workerruntime.RemoveOptions) error {
	if c.failRemoves.Add(-1) >= 0 {
		return errors.New("the engine is not answering")
	}
	c.failRemoves.Store(0)
	return c.Runtime.Remove(ctx, h, opts)
}

func (c *countingRuntime) State(ctx context.Context, h workerruntime.Handle) (workerruntime.State, error) {
	c.states.Add(1)
	return c.Runtime.State(ctx, h)
}

func (c *countingRuntime) Exec(ctx context.Context, h workerruntime.Handle, argv []string) (workerruntime.Session, error) {
	c.execs.Add(1)
	return c.Runtime.Exec(ctx, h, argv)
}

// How a stopped worker ended, as the Docker runtime says.
func (c *countingRuntime) Exit(ctx context.Context, h workerruntime.Handle) (workerruntime.Exit, bool, error) {
	return c.Runtime.(workerruntime.ExitReporter).Exit(ctx, h)
}

// The Docker runtime's internal networks, for egress workers.
func (c *countingRuntime) EnsureInternalNetwork(ctx context.Context, name string, labels map[string]string) (string, error) {
	return c.Runtime.(workerruntime.Networker).EnsureInternalNetwork(ctx, name, labels)
}

func (c *countingRuntime) Address(ctx context.Context, h workerruntime.Handle, network string) (string, error) {
	return c.Runtime.(workerruntime.Networker).Address(ctx, h, network)
}

type bundle struct {
	pool   *pgxpool.Pool
	store  *store.Store
	rt     *countingRuntime
	mgr    *journeys.Manager
	url    string
	labels map[string]string
	// images replaces catalog images (the agent worker runs the test image
	// with the fake claude); agentEnv and nestedURL configure agent workers.
	images    map[string]string
	agentEnv  []string
	nestedURL bool
	// sources is what spawn_worker sources may be; baseDir keeps the bases
	// across restarts of the manager.
	sources source.Policy
	baseDir string
	// archiveDir is where stops with workspace archive write.
	archiveDir string
	// adjust changes catalog definitions before the marketplace starts
	// (a smaller quota, say).
	adjust func(*meshtype.Definition)
	// maxPerCaller and maxTotal are the live journeys quotas per caller
	// and in all (0: the defaults).
	maxPerCaller, maxTotal int
	// egress runs an egress proxy for egress workers, on an internal
	// network of the test's own (egressNetwork).
	egress        bool
	egressNetwork string
	egressPort    int // this marketplace's proxy's
	// delegates may act on behalf of other callers.
	delegates []string
}

// setup starts a marketplace (real Docker runtime, real Postgres, real MCP
// over HTTP) and removes every container and volume it made when the test ends.
func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, &bundle{})
}

// setupWith is setup with some of the bundle's settings given.
func setupWith(t testing.TB, b *bundle) *bundle {
	t.Helper()
	requireImage(t, "meshwork/worker:latest")
	b.pool, b.labels = pgtest.Pool(t), map[string]string{"meshwork.test": "mcpserver-" + uuid.NewString()[:8]}
	b.store = store.New(b.pool)
	b.rt = &countingRuntime{Runtime: dockerRuntime(t)}
	b.baseDir, b.archiveDir = t.TempDir(), t.TempDir()
	t.Cleanup(func() { removeLabelled(t, b.labels["meshwork.test"]) })
	for token, caller := range map[string]string{aliceToken: "alice", bobToken: "bob"} {
		if err := b.store.PutToken(context.Background(), caller, bearer.Hash(token), nil); err != nil {
			t.Fatal(err)
		}
	}
	b.start(t)
	return b
}

// start (re)creates the manager and the HTTP server over the same database
// and runtime, as a restarted marketplace would.
func (b *bundle) start(t testing.TB) {
	t.Helper()
	catalog, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	for id, image := range b.images {
		e, _ := catalog.Lookup(id)
		e.Definition.Image = image
	}
	if b.adjust != nil {
		for _, e := range catalog.Entries() {
			b.adjust(&e.Definition)
			// The gate is compiled at load: compile it again from the
			// adjusted definition.
			if e.Gate, err = gate.Compile(&e.Definition); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv := httptest.NewUnstartedServer(nil)
	nested := ""
	if b.nestedURL {
		nested = "http://" + srv.Listener.Addr().String() + "/mcp"
	}
	reg := prometheus.NewRegistry()
	baseStore, err := bases.NewStore(b.baseDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := journeys.Config{
		Catalog: catalog, Store: b.store, Labels: b.labels, ArchiveDir: b.archiveDir,
		Runtimes: map[meshtype.IsolationLevel]workerruntime.Runtime{meshtype.IsolationContainer: b.rt},
		AgentEnv: b.agentEnv, NestedMCPURL: nested, Metrics: reg,
		Bases: baseStore, Sources: b.sources, MaxJourneysPerCaller: b.maxPerCaller, MaxJourneys: b.maxTotal,
	}
	var auditor atomic.Pointer[journeys.Manager]
	if b.egress {
		// On every interface: egress workers reach it at their network's
		// gateway, the host.
		ln, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		b.egressNetwork = "meshwork-test-" + b.labels["meshwork.test"]
		b.egressPort = ln.Addr().(*net.TCPAddr).Port
		cfg.EgressNetwork, cfg.EgressProxyPort = b.egressNetwork, b.egressPort
		cfg.Egress = egress.New(func(r egress.Record) {
			if m := auditor.Load(); m != nil {
				m.AuditEgress(r)
			}
		}, nil)
		proxy := &http.Server{Handler: cfg.Egress, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = proxy.Serve(ln) }()
		t.Cleanup(func() { _ = proxy.Close() })
	}
	b.mgr, err = journeys.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	auditor.Store(b.mgr)
	if err := b.mgr.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = mcpserver.NewHTTPHandler(mcpserver.New(b.mgr, catalog, meshapi.Delegating(meshapi.TokenCaller, b.delegates), nil), b.store,
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), "marketplace:8080")
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(b.mgr.Close)
	b.url = srv.URL
}

// client connects an MCP client over streamable HTTP with a bearer token,
// with the sending middleware given (telemetry.ClientMiddleware, to send
// the trace context in params._meta).
func (b *bundle) client(t testing.TB, token string, sending ...mcp.Middleware) *mcp.ClientSession {
	t.Helper()
	return mcptest.Connect(t, b.url+"/mcp", token, &mcptest.Options{Sending: sending})
}

// result is a tool call's outcome, decoded.
type result struct {
	isError bool
	text    string
	out     map[string]any
}

func call(t testing.TB, cs *mcp.ClientSession, tool string, args any) result {
	t.Helper()
	r, err := tryCall(cs, tool, args)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryCall is call for a goroutine other than the test's: a protocol error
// is returned.
func tryCall(cs *mcp.ClientSession, tool string, args any) (result, error) {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return result{}, fmt.Errorf("%s: protocol error: %w", tool, err)
	}
	r := result{isError: res.IsError}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			r.text += tc.Text
		}
	}
	if res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &r.out)
	}
	return r, nil
}

// must calls a tool that has to succeed.
func must(t testing.TB, cs *mcp.ClientSession, tool string, args any) map[string]any {
	t.Helper()
	r := call(t, cs, tool, args)
	if r.isError {
		t.Fatalf("%s %v: %s", tool, args, r.text)
	}
	return r.out
}

func requireImage(t testing.TB, image string) {
	t.Helper()
	dockertest.RequireImage(t, image, "run `make offline-images` (or `make images`)")
}

// removeLabelled removes the containers, volumes and networks a test made.
func removeLabelled(t testing.TB, value string) {
	t.Helper()
	dockertest.RemoveLabelled(context.Background(), "meshwork.test="+value)
}

func dockerRuntime(t testing.TB) workerruntime.Runtime {
	t.Helper()
	rt, err := docker.NewFromEnv(context.Background(), nil)
	if err != nil {
		t.Fatalf("connecting to Docker: %v", err)
	}
	return rt
}

// postMCP posts one raw JSON-RPC message to a marketplace's /mcp with a
// bearer token, and returns the HTTP status.
func postMCP(t testing.TB, base, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func toolParams(tool string, args any) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: tool, Arguments: args}
}
