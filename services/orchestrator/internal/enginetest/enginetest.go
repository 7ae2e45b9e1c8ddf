// Package enginetest starts a real engine for the tests of the orchestrator's
// surfaces (the HTTP API, the MCP tools, the serve command): on a fresh
// migrated database from pgtest, with a small catalog of test pipelines and
// [InstantExecutor] standing in for the agents. Only tests import it; their
// package's TestMain must call pgtest.Main.
package enginetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// Pipelines are the test pipelines, all of whose roles work via mesh:
//
//   - echo {task}: two nodes, one after the other;
//   - approval: a draft, an approval, then a publish that uses its value;
//   - signoff: approval whose approval node names its approver, bob.
var Pipelines = fstest.MapFS{
	"echo.yaml": {Data: []byte(`name: echo
description: Two steps, one after the other.
inputs:
  task: {type: string, required: true, description: What to do.}
  tone: {type: string, default: plain}
roles:
  a: {via: mesh, repository: a}
  b: {via: mesh, repository: b}
nodes:
  - {id: first, role: a, task: "first: {{ .inputs.task }}"}
  - {id: second, role: b, needs: [first], task: "second: {{ .nodes.first.output }}"}
`)},
	"approval.yaml": {Data: []byte(`name: approval
description: A draft, approved by a human, then published.
roles:
  a: {via: mesh, repository: a}
nodes:
  - {id: draft, role: a, task: draft}
  - {id: approve, type: approval, needs: [draft]}
  - {id: publish, role: a, needs: [approve], task: "publish with {{ .nodes.approve.output }}"}
`)},
	"signoff.yaml": {Data: []byte(`name: signoff
description: A draft that only bob may approve, then published.
roles:
  a: {via: mesh, repository: a}
nodes:
  - {id: draft, role: a, task: draft}
  - {id: approve, type: approval, needs: [draft], approvers: [bob]}
  - {id: publish, role: a, needs: [approve], task: "publish with {{ .nodes.approve.output }}"}
`)},
}

// Catalog loads Pipelines.
func Catalog(tb testing.TB) *pipeline.Catalog {
	tb.Helper()
	return CatalogOf(tb, Pipelines)
}

// CatalogOf loads a catalog of test pipelines, failing the test if one of
// them does not load: every test that brings its own pipelines needs them
// loaded before it can start an engine.
func CatalogOf(tb testing.TB, pipelines fs.FS) *pipeline.Catalog {
	tb.Helper()
	cat, err := pipeline.LoadDir(pipelines)
	if err != nil {
		tb.Fatalf("enginetest: loading the test pipelines: %v", err)
	}
	return cat
}

// Grid is a pipeline of rows × columns agent nodes, each node needing
// every node of the column before it: a large graph for benchmarks.
func Grid(name string, columns, rows int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ndescription: A grid of %d nodes.\nroles:\n  a: {via: mesh, repository: a}\nnodes:\n", name, columns*rows)
	for c := range columns {
		for r := range rows {
			fmt.Fprintf(&b, "  - {id: n%02d_%d, role: a, task: step", c, r)
			if c > 0 {
				b.WriteString(", needs: [")
				for p := range rows {
					if p > 0 {
						b.WriteString(", ")
					}
					fmt.Fprintf(&b, "n%02d_%d", c-1, p)
				}
				b.WriteString("]")
			}
			b.WriteString("}\n")
		}
	}
	return []byte(b.String())
}

// InstantExecutor is the one test double of an agent executor for the
// orchestrator's tests and benchmarks: it answers every task at once with
// "<role>: <task>" (or what Reply says), keeps one session per role and
// thread ("session-<thread>-<role>"), reports it while it works (OnSession)
// unless Quiet, records every call, and holds the tasks a test asks it to.
// With Patch set, each role keeps a journey per thread
// ("journey-<thread>-<role>") holding its latest patch, which Export takes
// out.
type InstantExecutor struct {
	// Reply, when set, makes a call's answer, and its error.
	Reply func(req executor.Request) (string, error)
	// Patch, when set, makes a call's change to its workspace (a git
	// diff), as a marketplace worker's result carries it.
	Patch func(req executor.Request) string
	// Omits, when set, makes the changed files a call's patch leaves out.
	Omits func(req executor.Request) []string
	// Cost, when set, is what a call reports it spent (an agent's own
	// report, untrusted).
	Cost func(req executor.Request) float64
	// Quiet: the session is not reported while the call runs, only in the
	// result, as an agent that names it at the end (no save mid-node).
	Quiet bool
	// Record keeps every call for Calls and Tasks; a benchmark turns it
	// off. New executors from Start record.
	Record bool

	mu       sync.Mutex
	calls    []executor.Request
	holds    map[string]chan struct{}
	journeys map[string]string
}

// Hold makes tasks that start with prefix wait, until release is called
// (or their call ends): a run that stays running while a test looks at it.
func (x *InstantExecutor) Hold(prefix string) (release func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.holds == nil {
		x.holds = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	x.holds[prefix] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			x.mu.Lock()
			delete(x.holds, prefix)
			x.mu.Unlock()
			close(ch)
		})
	}
}

// Execute answers req at once, unless a hold keeps it.
func (x *InstantExecutor) Execute(ctx context.Context, req executor.Request) (executor.Result, error) {
	if err := ctx.Err(); err != nil {
		return executor.Result{}, err
	}
	x.mu.Lock()
	if x.Record {
		x.calls = append(x.calls, req)
	}
	var held []chan struct{}
	for prefix, ch := range x.holds {
		if strings.HasPrefix(req.Task, prefix) {
			held = append(held, ch)
		}
	}
	x.mu.Unlock()
	for _, ch := range held {
		select {
		case <-ch:
		case <-ctx.Done():
			return executor.Result{}, ctx.Err()
		}
	}
	session := req.SessionID
	if session == "" {
		session = fmt.Sprintf("session-%s-%s", req.Thread, req.RoleName)
	}
	if req.OnSession != nil && !x.Quiet {
		req.OnSession(session)
	}
	out := req.RoleName + ": " + req.Task
	if x.Reply != nil {
		var err error
		if out, err = x.Reply(req); err != nil {
			return executor.Result{Output: out, SessionID: session}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return executor.Result{}, err
	}
	res := executor.Result{Output: out, SessionID: session}
	if x.Patch != nil {
		res.Patch = x.Patch(req)
		res.Journey, res.ChangeDigest = "journey-"+req.Thread+"-"+req.RoleName, digestOf(res.Patch)
		x.mu.Lock()
		if x.journeys == nil {
			x.journeys = map[string]string{}
		}
		x.journeys[res.Journey] = res.Patch
		x.mu.Unlock()
	}
	if x.Omits != nil {
		res.PatchOmits = x.Omits(req)
	}
	if x.Cost != nil {
		res.CostUSD = x.Cost(req)
	}
	return res, nil
}

// Export takes out a journey's workspace: "<format> of <journey>", a
// line, and its latest patch, whose digest (the SHA-256 of the patch) is
// the workspace's; a bundle's commit is "c0ffee". A journey no call made
// is not_found, as the marketplace says.
func (x *InstantExecutor) Export(ctx context.Context, journey, format string) (executor.Export, error) {
	x.mu.Lock()
	patch, ok := x.journeys[journey]
	x.mu.Unlock()
	if !ok {
		return executor.Export{}, meshapi.Errorf(meshapi.CodeNotFound, "journey %q: not found", journey)
	}
	content := []byte(format + " of " + journey + "\n" + patch)
	sum := sha256.Sum256(content)
	out := executor.Export{Digest: digestOf(patch), Content: content, SHA256: hex.EncodeToString(sum[:])}
	if format == "bundle" {
		out.Commit = "c0ffee"
	}
	return out, nil
}

// digestOf is the digest InstantExecutor gives a journey holding patch.
func digestOf(patch string) string {
	sum := sha256.Sum256([]byte(patch))
	return hex.EncodeToString(sum[:])
}

// Calls returns the calls made so far, in order.
func (x *InstantExecutor) Calls() []executor.Request {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]executor.Request(nil), x.calls...)
}

// Tasks returns the tasks given so far, in order.
func (x *InstantExecutor) Tasks() []string {
	calls := x.Calls()
	tasks := make([]string, len(calls))
	for i, c := range calls {
		tasks[i] = c.Task
	}
	return tasks
}

// Bundle is a started engine and what it runs on.
type Bundle struct {
	Engine   *engine.Engine
	Pool     *pgxpool.Pool
	DSN      string
	Executor *InstantExecutor
}

// Start starts an engine on a fresh database with Catalog and an
// InstantExecutor for via mesh and via marketplace, stopped when the test ends.
func Start(tb testing.TB) *Bundle {
	tb.Helper()
	return StartWith(tb, Pipelines)
}

// StartWith is Start with another catalog of pipelines.
func StartWith(tb testing.TB, pipelines fs.FS) *Bundle {
	tb.Helper()
	return StartWithExecutor(tb, pipelines, &InstantExecutor{Record: true})
}

// StartWithExecutor is StartWith with an executor of the test's (one that
// makes patches, say), set up before the engine starts calling it.
func StartWithExecutor(tb testing.TB, pipelines fs.FS, x *InstantExecutor) *Bundle {
	tb.Helper()
	pool, dsn := pgtest.PoolAndDSN(tb)
	b := &Bundle{Pool: pool, DSN: dsn, Executor: x}
	b.Engine = StartEngine(tb, engine.Config{
		Pool: pool, Catalog: CatalogOf(tb, pipelines),
		Executors:         map[pipeline.Via]executor.Executor{pipeline.ViaMesh: b.Executor, pipeline.ViaMarketplace: b.Executor},
		FetchPollInterval: 50 * time.Millisecond,
	})
	return b
}

// StartEngine starts an engine of cfg and stops it when the test ends,
// giving its nodes up to 10 s to finish: a test's engine never outlives
// the test, nor leaves a job running on its database. A failed stop fails
// the test.
func StartEngine(tb testing.TB, cfg engine.Config) *engine.Engine {
	tb.Helper()
	eng, err := engine.New(cfg)
	if err != nil {
		tb.Fatalf("enginetest: %v", err)
	}
	if err := eng.Start(context.Background()); err != nil {
		tb.Fatalf("enginetest: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := eng.Stop(ctx); err != nil {
			tb.Errorf("enginetest: stopping the engine: %v", err)
		}
	})
	return eng
}

// WhileConflict makes call again while it reports that it was refused as a
// conflict, for at most 30 s: a run that settled may hold its thread a
// moment longer, until its replica gives its lease up.
func WhileConflict(call func() (conflict bool)) {
	for deadline := time.Now().Add(30 * time.Second); call() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
}
