package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/jackc/pgx/v5/pgxpool"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/meshexectest"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	meshexectest.RemoveBinaries()
	if dir := binDir.Load(); dir != nil {
		_ = os.RemoveAll(*dir)
	}
	os.Exit(code)
}

// crashPipelines is the catalog the replicas serve: three agent nodes, one
// after the other, alternating two roles.
const crashPipeline = `name: relay
inputs: {task: {type: string, required: true}}
roles:
  a: {via: mesh, repository: a}
  b: {via: mesh, repository: b}
nodes:
  - {id: one, role: a, task: "one: {{ .inputs.task }}"}
  - {id: two, role: b, needs: [one], task: "two: {{ .nodes.one.output }}"}
  - {id: three, role: a, needs: [two], task: "three: {{ .nodes.two.output }}"}
`

const apiToken = "durability-test-token-0123456789"

var (
	binDir   atomic.Pointer[string]
	buildBin = sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "meshwork-orchestrator-bin-")
		if err != nil {
			return "", err
		}
		binDir.Store(&dir)
		bin := filepath.Join(dir, "orchestrator")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			return "", fmt.Errorf("building orchestrator: %w\n%s", err, out)
		}
		return bin, nil
	})
)

// replica is one `orchestrator serve` process.
type replica struct {
	t      *testing.T
	args   []string
	env    []string
	cmd    *exec.Cmd
	done   chan struct{}
	addr   string
	client *apiclient.Client
	mu     sync.Mutex
	log    strings.Builder
}

type cluster struct {
	dsn     string
	pool    *pgxpool.Pool
	mesh    *meshexectest.Server
	pipeDir string
	otlp    *telemetrytest.Collector
}

// checkOneTrace asserts that the spans exported of a finished relay run are
// all in the run's trace, that each of its nodes has one (the crashed
// replica's are lost, its successor's are not), and that every
// mesh_execute call made for it is a child of a node span of that trace.
//
// killed names a replica (its name, or its id) SIGKILLed during the test: the spans it had not
// exported yet died with it, so its nodes' spans are not required (those it
// did export are still checked).
func (c *cluster) checkOneTrace(t *testing.T, v api.RunView, killed string) {
	t.Helper()
	if len(v.TraceID) != 32 {
		t.Fatalf("run %s has trace_id %q", v.ID, v.TraceID)
	}
	want := map[string]bool{}
	for _, a := range v.Attempts {
		if a.Status == "succeeded" && (killed == "" || (a.Replica != killed && !strings.HasPrefix(a.Replica, killed+"-"))) {
			want[a.NodeID] = true
		}
	}
	waitFor(t, "the run's node spans to be exported", 30*time.Second, func() bool {
		exported := map[string]bool{}
		for _, s := range c.otlp.Spans() {
			if s.Attributes["meshwork.run.id"] == v.ID && s.Attributes["meshwork.node.id"] != "" && s.Attributes["meshwork.node.outcome"] == "succeeded" {
				exported[s.Attributes["meshwork.node.id"]] = true
			}
		}
		for id := range want {
			if !exported[id] {
				return false
			}
		}
		return true
	})
	spans := c.otlp.Spans()
	nodeSpans := map[string]bool{}
	for _, s := range spans {
		if s.Attributes["meshwork.run.id"] != v.ID {
			continue
		}
		if s.TraceID != v.TraceID {
			t.Errorf("run %s: span %q (node %s) is in trace %s, want the run's %s", v.ID, s.Name, s.Attributes["meshwork.node.id"], s.TraceID, v.TraceID)
		}
		if s.Attributes["meshwork.node.id"] != "" {
			nodeSpans[s.SpanID] = true
		}
	}
	exported := map[string]bool{}
	for _, s := range spans {
		exported[s.SpanID] = true
	}
	calls := 0
	for _, s := range spans {
		if s.TraceID == v.TraceID && s.Name == "tools/call mesh_execute" && s.Kind == tracepb.Span_SPAN_KIND_CLIENT.String() {
			calls++
			// A call of a node the killed replica was running when it died
			// was exported, but the node's span, still open, never was.
			if killed != "" && !exported[s.ParentID] {
				continue
			}
			if !nodeSpans[s.ParentID] {
				t.Errorf("run %s: a mesh_execute call's parent %s is no node span of the run", v.ID, s.ParentID)
			}
		}
	}
	if calls < len(want) {
		t.Errorf("run %s: %d mesh_execute calls exported in its trace, want one per node at least (%d)", v.ID, calls, len(want))
	}
}

func newCluster(t *testing.T, script any) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Postgres and subprocesses")
	}
	c := &cluster{pipeDir: t.TempDir()}
	c.pool, c.dsn = pgtest.PoolAndDSN(t)
	if err := os.WriteFile(filepath.Join(c.pipeDir, "relay.yaml"), []byte(crashPipeline), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mesh = meshexectest.Start(t, meshexectest.Options{Script: script})
	c.otlp = telemetrytest.NewCollector(t)
	return c
}

// start starts a replica and waits until it serves.
func (c *cluster) start(t *testing.T, name string) *replica {
	t.Helper()
	bin, err := buildBin()
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{t: t, args: []string{
		"serve", "--addr", "127.0.0.1:0", "--pipelines", c.pipeDir, "--mesh-url", c.mesh.Endpoint,
		"--lease-ttl", "2s", "--replica-id", name,
	}}
	r.env = append(os.Environ(), "DATABASE_URL="+c.dsn, "ORCHESTRATOR_TOKENS=tester="+apiToken, "MESH_EXEC_TOKEN="+c.mesh.Token,
		// Spans exported within 50 ms of their end, so that a crash loses
		// only those of the node it interrupts.
		"OTEL_EXPORTER_OTLP_ENDPOINT="+c.otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=orchestrator-"+name)
	r.run(t, bin)
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("replica %s's log:\n%s", name, r.logText())
		}
	})
	return r
}

func (r *replica) run(t *testing.T, bin string) {
	t.Helper()
	r.cmd = exec.Command(bin, r.args...)
	r.cmd.Env = r.env
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.done = make(chan struct{})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			r.mu.Lock()
			r.log.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			var line struct{ Addr string }
			if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && line.Addr != "" {
				addr <- line.Addr
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	select {
	case a := <-addr:
		r.addr = a
		r.client = apiclient.New("http://"+a, apiToken, nil)
	case <-r.done:
		t.Fatalf("orchestrator exited before serving:\n%s", r.logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("orchestrator did not serve:\n%s", r.logText())
	}
}

func (r *replica) logText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// kill is a crash: SIGKILL, no cleanup.
func (r *replica) kill() {
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}

func (r *replica) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		r.kill()
	}
}

// restart starts the replica again with the same flags.
func (r *replica) restart(t *testing.T) {
	t.Helper()
	bin, _ := buildBin()
	r.run(t, bin)
}

// waitRun waits until the run is no longer running.
func waitRun(t *testing.T, c *apiclient.Client, runID string, timeout time.Duration) api.RunView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, err := c.GetRun(context.Background(), runID)
		if err == nil && v.Status != api.RunRunning {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after %s (%v)", runID, v.Status, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls cond every 10ms until it holds.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *cluster) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := c.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkExactlyOnce asserts a finished relay run committed each node once
// and that each role kept one session.
func (c *cluster) checkExactlyOnce(t *testing.T, v api.RunView) {
	t.Helper()
	if v.Status != api.RunSucceeded {
		t.Fatalf("run %s is %s: %s", v.ID, v.Status, v.Error)
	}
	for _, node := range []string{"one", "two", "three"} {
		if n := c.count(t, `SELECT count(*) FROM checkpoints WHERE run_id = $1 AND node_id = $2`, v.ID, node); n != 1 {
			t.Errorf("run %s: node %s committed %d times", v.ID, node, n)
		}
		if n := c.count(t, `SELECT count(*) FROM node_attempts WHERE run_id = $1 AND node_id = $2 AND status = 'succeeded'`, v.ID, node); n != 1 {
			t.Errorf("run %s: node %s has %d succeeded attempts", v.ID, node, n)
		}
	}
	if !strings.HasPrefix(v.Outputs["three"], "ok: three: ok: two: ok: one: ") {
		t.Errorf("run %s: three's output %q", v.ID, v.Outputs["three"])
	}
}

// Crash recovery: the replica is killed with SIGKILL in the middle of a
// node and right after a commit; after a restart every run completes, no
// node result is committed twice, and the killed node resumes its role's
// session rather than starting a new one.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	// Each agent turn takes a while, so there is a "middle" of a node.
	c := newCluster(t, map[string]any{"steps": []any{map[string]any{"sleep_ms": 1500}}})
	r := c.start(t, "replica-a")
	ctx := context.Background()

	t.Run("mid-node", func(t *testing.T) {
		run, err := r.client.StartRun(ctx, api.StartRequest{Pipeline: "relay", Inputs: map[string]any{"task": "mid"}})
		if err != nil {
			t.Fatal(err)
		}
		// Node two has started: its role's session is saved (the agent
		// named it), and its result is not committed.
		var session string
		waitFor(t, "node two's agent to start", 30*time.Second, func() bool {
			_ = c.pool.QueryRow(ctx, `SELECT coalesce((SELECT session_id FROM role_sessions WHERE thread = $1 AND role = 'b'), '')`, run.Thread).Scan(&session)
			return session != ""
		})
		if n := c.count(t, `SELECT count(*) FROM checkpoints WHERE run_id = $1 AND node_id = 'two'`, run.ID); n != 0 {
			t.Fatal("node two finished before the kill; the agent is too fast for this test")
		}
		var killed string
		if err := c.pool.QueryRow(ctx, `SELECT replica FROM node_attempts WHERE run_id = $1 AND node_id = 'one'`, run.ID).Scan(&killed); err != nil {
			t.Fatal(err)
		}
		r.kill()
		r.restart(t)
		v := waitRun(t, r.client, run.ID, 90*time.Second)
		c.checkExactlyOnce(t, v)
		c.checkOneTrace(t, v, killed) // node two's span is the restarted replica's
		if v.Sessions["b"] != session {
			t.Errorf("role b's session is %s after the crash, want the one it had started, %s", v.Sessions["b"], session)
		}
		// The re-run of node two resumed that session.
		resumed := false
		for _, inv := range c.mesh.Invocations(t) {
			argv := inv.Args()
			if strings.Contains(argv, "--resume "+session) && strings.Contains(argv, "two: ") {
				resumed = true
			}
		}
		if !resumed {
			t.Errorf("no agent run resumed session %s for node two", session)
		}
	})

	t.Run("after-commit", func(t *testing.T) {
		run, err := r.client.StartRun(ctx, api.StartRequest{Pipeline: "relay", Inputs: map[string]any{"task": "commit"}})
		if err != nil {
			t.Fatal(err)
		}
		// Killed as soon as node one's result is committed: its successor's
		// job was committed with it, and must not be lost.
		waitFor(t, "node one's commit", 30*time.Second, func() bool {
			return c.count(t, `SELECT count(*) FROM checkpoints WHERE run_id = $1 AND node_id = 'one'`, run.ID) == 1
		})
		r.kill()
		r.restart(t)
		c.checkExactlyOnce(t, waitRun(t, r.client, run.ID, 90*time.Second))
	})

	t.Run("before-start", func(t *testing.T) {
		// Killed with runs queued and none started: all complete after.
		var ids []string
		for i := range 3 {
			run, err := r.client.StartRun(ctx, api.StartRequest{Pipeline: "relay", Inputs: map[string]any{"task": fmt.Sprint("queued ", i)}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, run.ID)
		}
		r.kill()
		r.restart(t)
		for _, id := range ids {
			c.checkExactlyOnce(t, waitRun(t, r.client, id, 90*time.Second))
		}
	})
}

// Replicas: two replicas share 50 runs; none is lost, none doubled, and
// both did work. One of them crashes half-way: the other takes its runs
// over.
func TestReplicas(t *testing.T) {
	t.Parallel()
	// A slow first turn, so that replica b dies with nodes in hand.
	c := newCluster(t, map[string]any{"steps": []any{map[string]any{"sleep_ms": 50}}})
	a := c.start(t, "replica-a")
	b := c.start(t, "replica-b")
	ctx := context.Background()
	var ids []string
	for i := range 50 {
		client := a.client
		if i%2 == 1 {
			client = b.client
		}
		run, err := client.StartRun(ctx, api.StartRequest{Pipeline: "relay", Inputs: map[string]any{"task": fmt.Sprint("run ", i)}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	// b works some nodes, then crashes.
	waitFor(t, "replica b to commit nodes", 60*time.Second, func() bool {
		return c.count(t, `SELECT count(*) FROM node_attempts WHERE replica LIKE 'replica-b-%'`) >= 5
	})
	b.kill()
	for _, id := range ids {
		v := waitRun(t, a.client, id, 120*time.Second)
		c.checkExactlyOnce(t, v)
		c.checkOneTrace(t, v, "replica-b") // whichever replica worked each node
	}
	if n := c.count(t, `SELECT count(*) FROM runs`); n != 50 {
		t.Errorf("%d runs, want 50", n)
	}
	if n := c.count(t, `SELECT count(DISTINCT replica) FROM node_attempts`); n != 2 {
		t.Errorf("nodes were worked by %d replicas, want both", n)
	}
}
