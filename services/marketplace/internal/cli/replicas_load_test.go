package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/servicetest"
	"github.com/meshwork/meshwork/workers"
)

const loadToken = "alice-load-token-0123456789"

// loadWorker is a filesystem worker whose journeys stop at max_actions.
const loadWorker = `id: load_v1
extends: filesystem_base_v1
name: Load
description: A filesystem worker with a small max_actions, for the replicas load test.
tools: [read, write, list]
constraints:
  max_actions: %d
`

// loadJourneys is how many journeys the clients share.
const loadJourneys = 5

// loadEnv is marketplace replicas on one database behind one endpoint,
// with loadJourneys journeys of load_v1 spawned.
type loadEnv struct {
	dsn        string
	maxActions int
	replicas   []*replicaProcess
	front      *frontDoor
	endpoint   string
}

// startLoadEnv starts n replicas whose load_v1 journeys stop at maxActions.
func startLoadEnv(tb testing.TB, n, maxActions int) *loadEnv {
	tb.Helper()
	bin, label := buildMarketplace(tb)
	catalog := tb.TempDir()
	if err := os.CopyFS(catalog, workers.FS()); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(catalog, "load_v1.yaml"), fmt.Appendf(nil, loadWorker, maxActions), 0o600); err != nil {
		tb.Fatal(err)
	}
	env := &loadEnv{dsn: pgtest.DSN(tb), maxActions: maxActions}
	var urls []*url.URL
	for range n {
		r := startReplica(tb, bin, env.dsn, catalog, label)
		env.replicas, urls = append(env.replicas, r), append(urls, r.url)
	}
	env.front = newFrontDoor(urls...)
	srv := httptest.NewServer(env.front.proxy())
	tb.Cleanup(srv.Close)
	env.endpoint = srv.URL
	setup := loadClient(tb, env.endpoint)
	for j := range loadJourneys {
		res, err := setup.CallTool(context.Background(), &mcp.CallToolParams{Name: meshapi.ToolSpawnWorker, Arguments: map[string]any{"worker_id": "load_v1", "journey_id": fmt.Sprintf("load-%d", j)}})
		if err != nil || res.IsError {
			tb.Fatalf("spawn: %v %s", err, meshapi.ResultText(res))
		}
	}
	return env
}

// loadOutcome is what a load saw.
type loadOutcome struct {
	total                                int
	failures, retries, afterKill, killed int64
	executed, refused                    [loadJourneys]int64
	elapsed                              time.Duration
	latencies                            []time.Duration // sorted
	errs                                 []error
}

// run makes clients × perClient reads ("list") on the shared journeys, each
// client on a connection of its own; with killAt > 0, the last replica is
// SIGKILLed once that many reads are done. A read that fails is made again,
// up to three times, as a client of a replicated service does (reads are
// idempotent).
func (env *loadEnv) run(tb testing.TB, clients, perClient, killAt int) loadOutcome {
	tb.Helper()
	out := loadOutcome{total: clients * perClient}
	var (
		done, retries, failures, afterKill atomic.Int64
		executed, refused                  [loadJourneys]atomic.Int64
		latencies                          = make([][]time.Duration, clients)
		killed                             atomic.Bool
		wg                                 sync.WaitGroup
		mu                                 sync.Mutex
	)
	sessions := make([]*mcp.ClientSession, clients)
	for c := range clients {
		sessions[c] = loadClient(tb, env.endpoint)
	}
	defer func() {
		for _, cs := range sessions {
			_ = cs.Close()
		}
	}()
	started := time.Now()
	for c := range clients {
		cs := sessions[c]
		wg.Go(func() {
			for i := range perClient {
				j := (c + i) % loadJourneys
				params := &mcp.CallToolParams{Name: meshapi.ToolExecuteInWorker, Arguments: map[string]any{"journey_id": fmt.Sprintf("load-%d", j), "action": map[string]any{"type": "list", "target": "."}}}
				t0 := time.Now()
				res, err := cs.CallTool(context.Background(), params)
				for try := 0; err != nil && try < 3; try++ {
					retries.Add(1)
					time.Sleep(50 * time.Millisecond)
					res, err = cs.CallTool(context.Background(), params)
				}
				latencies[c] = append(latencies[c], time.Since(t0))
				if n := done.Add(1); killed.Load() {
					afterKill.Add(1)
				} else if killAt > 0 && n == int64(killAt) && killed.CompareAndSwap(false, true) {
					env.replicas[len(env.replicas)-1].proc.Kill()
				}
				if err == nil {
					var r struct {
						Executed   bool                 `json:"executed"`
						Violations []meshtype.Violation `json:"violations"`
					}
					raw, _ := json.Marshal(res.StructuredContent)
					_ = json.Unmarshal(raw, &r)
					switch {
					case r.Executed:
						executed[j].Add(1)
						continue
					case len(r.Violations) == 1 && r.Violations[0].ConstraintID == "max_actions":
						refused[j].Add(1)
						continue
					}
					err = fmt.Errorf("journey %d: %s", j, meshapi.ResultText(res))
				}
				failures.Add(1)
				mu.Lock()
				out.errs = append(out.errs, fmt.Errorf("client %d read %d: %w", c, i, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out.elapsed = time.Since(started)
	out.failures, out.retries, out.afterKill = failures.Load(), retries.Load(), afterKill.Load()
	if killed.Load() {
		out.killed = 1
	}
	for j := range loadJourneys {
		out.executed[j], out.refused[j] = executed[j].Load(), refused[j].Load()
	}
	out.latencies = slices.Concat(latencies...)
	slices.Sort(out.latencies)
	return out
}

// percentile is the p-th percentile of sorted latencies.
func (o loadOutcome) percentile(p int) time.Duration {
	return o.latencies[min(len(o.latencies)*p/100, len(o.latencies)-1)]
}

// Two marketplace processes on one database behind one endpoint, under
// load from many MCP clients reading on shared journeys that have
// max_actions set, one replica SIGKILLed half-way: no client sees an error
// (a read cut off by the kill is read again), each journey stops at exactly
// its limit, the audit has a row for each answered read (and at most one
// more for a read made again), and the journeys go on through the other
// replica.
//
// MESHWORK_REPLICA_LOAD=<clients>x<reads> sets the load (the is
// 50x200); CI runs a smaller one.
func TestReplicasUnderLoadWithOneKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker, Postgres and the worker image")
	}
	clients, perClient := 16, 30
	if v := os.Getenv("MESHWORK_REPLICA_LOAD"); v != "" {
		if _, err := fmt.Sscanf(v, "%dx%d", &clients, &perClient); err != nil || clients < 1 || perClient < 2 {
			t.Fatalf("MESHWORK_REPLICA_LOAD=%q is not <clients>x<reads>", v)
		}
	}
	total := clients * perClient
	maxActions := total * 3 / 4 / loadJourneys // a quarter of the reads pass the limit
	if maxActions < 1 {
		t.Fatalf("MESHWORK_REPLICA_LOAD=%dx%d is too small a load for %d journeys", clients, perClient, loadJourneys)
	}
	env := startLoadEnv(t, 2, maxActions)
	o := env.run(t, clients, perClient, total/2)
	for _, err := range o.errs {
		t.Error(err)
	}
	if o.killed == 0 || o.afterKill == 0 {
		t.Fatalf("the kill did not happen half-way (killed %d, %d reads after it)", o.killed, o.afterKill)
	}

	pool, err := pgxpool.New(context.Background(), env.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var audited, allowed int64
	for j := range loadJourneys {
		id := fmt.Sprintf("load-%d", j)
		var count, rows, allowedRows int64
		if err := pool.QueryRow(context.Background(), `SELECT j.action_count,
			(SELECT count(*) FROM actions a WHERE a.journey_uid = j.uid AND a.action_type = 'list'),
			(SELECT count(*) FROM actions a WHERE a.journey_uid = j.uid AND a.action_type = 'list' AND a.decision = 'allowed')
			FROM journeys j WHERE j.id = $1`, id).Scan(&count, &rows, &allowedRows); err != nil {
			t.Fatal(err)
		}
		audited, allowed = audited+rows, allowed+allowedRows
		if count != int64(env.maxActions) {
			t.Errorf("journey %s: action_count %d, want exactly max_actions (%d)", id, count, env.maxActions)
		}
		if o.executed[j] > int64(env.maxActions) {
			t.Errorf("journey %s: clients saw %d reads executed, over max_actions (%d)", id, o.executed[j], env.maxActions)
		}
	}
	// Each read a client got an answer to is audited once; a read cut off
	// by the kill and read again may be audited twice, no more.
	answered := int64(o.total) - o.failures
	if audited < answered || audited > answered+o.retries {
		t.Errorf("%d audit rows for %d answered reads and %d reads made again", audited, answered, o.retries)
	}
	if env.front.rerouted.Load() == 0 {
		t.Error("no request went to the surviving replica instead of the killed one")
	}
	t.Logf("%d clients × %d reads on %d shared journeys (max_actions %d) through 2 replicas, one SIGKILLed after %d: %d errors, %d reads made again, %d requests sent to the other replica, %.1f s, %.0f reads/s, p50 %v, p99 %v; %d audit rows, %d allowed",
		clients, perClient, loadJourneys, env.maxActions, total/2, o.failures, o.retries, env.front.rerouted.Load(), o.elapsed.Seconds(), float64(o.total)/o.elapsed.Seconds(),
		o.percentile(50).Round(time.Millisecond), o.percentile(99).Round(time.Millisecond), audited, allowed)
}

// BenchmarkReplicaLoad measures what a second replica costs or gives: 20
// clients × 20 reads per iteration on 5 shared journeys, through one
// endpoint in front of one marketplace process, and of two.
func BenchmarkReplicaLoad(b *testing.B) {
	for _, n := range []int{1, 2} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			env := startLoadEnv(b, n, 1<<30) // no limit reached: every read runs
			var all []time.Duration
			var reads int
			var elapsed time.Duration
			for b.Loop() {
				o := env.run(b, 20, 20, 0)
				if len(o.errs) > 0 {
					b.Fatal(o.errs[0])
				}
				all, reads, elapsed = append(all, o.latencies...), reads+o.total, elapsed+o.elapsed
			}
			slices.Sort(all)
			b.ReportMetric(float64(reads)/elapsed.Seconds(), "reads/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// replicaProcess is a marketplace serving MCP over HTTP.
type replicaProcess struct {
	proc *servicetest.Process
	url  *url.URL
}

// startReplica runs bin as one more marketplace replica on dsn's database.
func startReplica(t testing.TB, bin, dsn, catalog, label string) *replicaProcess {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--transport", "http", "--addr", "127.0.0.1:0", "--catalog", catalog, "--labels", label, "--base-dir", t.TempDir(), "--archive-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "MESHWORK_TOKENS=alice="+loadToken)
	p := servicetest.Start(t, cmd, "serving MCP over HTTP")
	return &replicaProcess{proc: p, url: &url.URL{Scheme: "http", Host: p.Addr}}
}

// frontDoor is one endpoint for several replicas, as a load balancer is: it
// sends each request to the next replica, and to another one when a
// replica refuses the connection (the request never reached it, so sending
// it elsewhere cannot run it twice). A request cut off after it reached a
// replica fails: only its client knows whether it may be made again.
type frontDoor struct {
	backends []*url.URL
	next     atomic.Uint64
	rerouted atomic.Int64
}

func newFrontDoor(backends ...*url.URL) *frontDoor { return &frontDoor{backends: backends} }

func (f *frontDoor) proxy() http.Handler {
	return &httputil.ReverseProxy{
		Rewrite:       func(*httputil.ProxyRequest) {}, // RoundTrip picks the replica
		Transport:     f,
		FlushInterval: -1, // event streams as they come
	}
}

func (f *frontDoor) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, err
		}
		_ = r.Body.Close()
	}
	first := f.next.Add(1)
	var err error
	for i := range len(f.backends) {
		be := f.backends[(first+uint64(i))%uint64(len(f.backends))]
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.Host = be.Scheme, be.Host, be.Host
		out.Body = io.NopCloser(bytes.NewReader(body))
		var resp *http.Response
		if resp, err = http.DefaultTransport.RoundTrip(out); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return resp, err
		}
		f.rerouted.Add(1)
	}
	return nil, err
}

// loadClient connects an MCP client to the endpoint as alice.
func loadClient(t testing.TB, endpoint string) *mcp.ClientSession {
	t.Helper()
	return mcptest.Connect(t, endpoint+"/mcp", loadToken, nil)
}
