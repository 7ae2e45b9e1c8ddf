package engine_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/meshexectest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	meshexectest.RemoveBinaries()
	os.Exit(code)
}

// testPipelines are small pipelines for the engine's rules, all of whose
// roles are via mesh (served by enginetest.InstantExecutor).
var testPipelines = fstest.MapFS{
	"linear.yaml": {Data: []byte(`
name: linear
inputs: {task: {type: string, required: true}}
roles:
  a: {via: mesh, repository: a}
  b: {via: mesh, repository: b}
nodes:
  - {id: one, role: a, task: "one: {{ .inputs.task }}"}
  - {id: two, role: b, needs: [one], task: "two: {{ .nodes.one.output }}"}
  - {id: three, role: a, needs: [two], task: "three: {{ .nodes.two.output }}"}
`)},
	"loop.yaml": {Data: []byte(`
name: loop
roles:
  w: {via: mesh, repository: w}
  r: {via: mesh, repository: r}
nodes:
  - {id: write, role: w, task: "write"}
  - {id: review, role: r, needs: [write], task: "review {{ .nodes.write.output }}"}
  - {id: revise, role: w, needs: [review], when: "nodes.review.output.contains('CHANGES')", task: "revise", next: write, max_iterations: 2}
  - {id: done, role: r, needs: [review, revise], task: "done"}
`)},
	"retry.yaml": {Data: []byte(`
name: retry
roles:
  a: {via: mesh, repository: a}
nodes:
  - id: flaky
    role: a
    task: flaky
    retry: {max_attempts: 3, backoff: 10ms}
  - {id: after, role: a, needs: [flaky], task: "after {{ .nodes.flaky.output }}"}
`)},
	"approval.yaml": enginetest.Pipelines["approval.yaml"],
	"diamond.yaml": {Data: []byte(`
name: diamond
roles:
  a: {via: mesh, repository: a}
nodes:
  - {id: start, role: a, task: start}
  - {id: left, role: a, needs: [start], task: left}
  - {id: middle, role: a, needs: [start], task: middle}
  - {id: right, role: a, needs: [start], task: right}
  - {id: join, role: a, needs: [left, middle, right], task: "join {{ .nodes.left.output }} {{ .nodes.middle.output }} {{ .nodes.right.output }}"}
`)},
	"fastslow.yaml": {Data: []byte(`
name: fastslow
roles:
  a: {via: mesh, repository: a}
nodes:
  - {id: start, role: a, task: start}
  - {id: fast, role: a, needs: [start], task: fast}
  - {id: slow, role: a, needs: [start], task: slow}
  - {id: after, role: a, needs: [fast], task: "after {{ .nodes.fast.output }}"}
  - {id: end, role: a, needs: [after, slow], task: end}
`)},
	"fanout.yaml": {Data: []byte(`
name: fanout
inputs: {topics: {type: string, required: true}}
roles:
  a: {via: mesh, repository: a}
nodes:
  - {id: split, role: a, task: "{{ .inputs.topics }}"}
  - {id: each, role: a, needs: [split], foreach: "nodes.split.output.split(',')", max_concurrency: 2, task: "about {{ .item }}"}
  - {id: join, role: a, needs: [each], task: "join {{ .nodes.each.output }}"}
`)},
}

type bundle struct {
	pool *pgxpool.Pool
	dsn  string
	eng  *engine.Engine
	exec *enginetest.InstantExecutor
	cat  *pipeline.Catalog
}

func loadTestCatalog(t testing.TB) *pipeline.Catalog {
	t.Helper()
	return enginetest.CatalogOf(t, testPipelines)
}

// setup starts an engine on a fresh database with the test pipelines and
// the test executor (enginetest.InstantExecutor), answering with reply when
// it is set.
func setup(t *testing.T, reply func(executor.Request) (string, error)) *bundle {
	t.Helper()
	pool, dsn := pgtest.PoolAndDSN(t)
	b := &bundle{pool: pool, dsn: dsn, exec: &enginetest.InstantExecutor{Record: true, Reply: reply}, cat: loadTestCatalog(t)}
	b.eng = startEngine(t, pool, b.cat, map[pipeline.Via]executor.Executor{pipeline.ViaMesh: b.exec}, "")
	return b
}

func startEngine(t testing.TB, pool *pgxpool.Pool, cat *pipeline.Catalog, ex map[pipeline.Via]executor.Executor, replica string) *engine.Engine {
	t.Helper()
	return startEngineConfig(t, engine.Config{Pool: pool, Catalog: cat, Executors: ex, ReplicaID: replica})
}

// startEngineConfig starts an engine of cfg (a lease of 3 s unless set),
// stopped when the test ends.
func startEngineConfig(t testing.TB, cfg engine.Config) *engine.Engine {
	t.Helper()
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 3 * time.Second
	}
	return enginetest.StartEngine(t, cfg)
}

// waitStatus waits until the run reaches one of the statuses.
func waitStatus(t testing.TB, eng *engine.Engine, runID string, statuses ...string) api.RunView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := eng.Watch(ctx, runID, -1, func(engine.Event) error { return nil })
	if err != nil {
		t.Fatalf("watching run %s: %v", runID, err)
	}
	v, err := eng.GetRun(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range statuses {
		if v.Status == s {
			return v
		}
	}
	t.Fatalf("run %s is %s (%s), want one of %v", runID, v.Status, v.Error, statuses)
	return v
}

func start(t testing.TB, eng *engine.Engine, name string, inputs map[string]any) api.Run {
	t.Helper()
	run, err := eng.StartRun(context.Background(), engine.StartRequest{Pipeline: name, Inputs: inputs})
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	return run
}

func errIs(err, target error) bool { return errors.Is(err, target) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }

var _ = goleak.IgnoreCurrent

// eventually waits up to 30 seconds for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// commits counts the checkpoints of node in run: how many times it was
// committed.
func commits(t *testing.T, pool *pgxpool.Pool, runID, node string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM checkpoints WHERE run_id = $1 AND node_id = $2`, runID, node).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
