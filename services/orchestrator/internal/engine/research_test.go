package engine_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/marketplace"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mesh"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/meshexectest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/marketplacetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/pipelines"
)

// fakeAgentImage is the test-only agent worker image whose claude is the
// fake (make test-images).
const fakeAgentImage = "meshwork/claude-worker-fake:test"

// The shipped research_pipeline end to end, on real parts: the researcher
// and the reviewer are agents behind a real mesh-exec (the fake claude), the
// writer is the marketplace's Claude Code worker in its own container. The
// reviewer's session asks for changes on its first turn and approves on its
// second, so the bounded revise loop runs once; then the run waits for a
// human, whose decision completes it.
func TestResearchPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker, Postgres and the test images")
	}
	t.Parallel()
	requireImage(t, fakeAgentImage)
	ctx := context.Background()
	pool, dsn := pgtest.PoolAndDSN(t)

	// Each fake session answers turn by turn: the reviewer's first review
	// asks for changes, its second approves.
	meshSrv := meshexectest.Start(t, meshexectest.Options{Script: map[string]any{
		"turns": []any{map[string]any{"reply": "CHANGES: add figures"}, map[string]any{"reply": "APPROVED"}},
	}})
	mpEx := startMarketplace(t, dsn)

	meshEx, err := mesh.New(mesh.Config{Endpoint: meshSrv.Endpoint, Token: meshSrv.Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = meshEx.Close() })
	eng := startEngine(t, pool, shippedCatalog(t), map[pipeline.Via]executor.Executor{pipeline.ViaMesh: meshEx, pipeline.ViaMarketplace: mpEx}, "")

	run := start(t, eng, "research_pipeline", map[string]any{"task": "the history of Go's scheduler"})
	v := waitStatus(t, eng, run.ID, runstate.RunWaiting)

	// Every role's session is in Postgres, and each role kept one session.
	for _, role := range []string{"researcher", "writer", "reviewer"} {
		if len(v.Sessions[role]) != 36 {
			t.Errorf("role %s has session %q, want a session id", role, v.Sessions[role])
		}
	}
	counts := map[string]int{}
	for _, a := range v.Attempts {
		counts[a.NodeID]++
		role := map[string]string{"research": "researcher", "write": "writer", "revise": "writer", "review": "reviewer"}[a.NodeID]
		if a.SessionID != v.Sessions[role] {
			t.Errorf("node %s ran in session %s, not its role's %s", a.NodeID, a.SessionID, v.Sessions[role])
		}
	}
	if counts["research"] != 1 || counts["write"] != 2 || counts["review"] != 2 || counts["revise"] != 1 {
		t.Errorf("attempts per node %v: want research 1, write 2, review 2, revise 1", counts)
	}
	// Outputs flow through the templates: the researcher's first turn went
	// into the writer's task, which the fake echoes ("ok: <task>").
	if !strings.Contains(v.Outputs["write"], "CHANGES: add figures") || !strings.Contains(v.Outputs["write"], "Write a report for software engineers") {
		t.Errorf("write's output %q does not carry the research and the inputs", v.Outputs["write"])
	}
	if v.Outputs["review"] != "APPROVED" {
		t.Errorf("the second review %q, want APPROVED", v.Outputs["review"])
	}
	// The reviewer's second review resumed its session (the fake's second turn).
	var resumed int
	for _, inv := range meshSrv.Invocations(t) {
		if strings.Contains(inv.Args(), "--resume") {
			resumed++
		}
	}
	if resumed != 1 {
		t.Errorf("%d mesh-exec runs resumed a session, want 1 (the second review)", resumed)
	}

	if len(v.Interrupts) != 1 {
		t.Fatalf("interrupts %+v", v.Interrupts)
	}
	// While the run waits for a human, the writer's journey is stopped,
	// its workspace and session kept: it holds no worker, and no share of
	// the orchestrator's journey quota at the marketplace.
	waitJourneys(t, pool, map[string]int{"stopped": 1})
	if _, err := eng.Resume(ctx, engine.ResumeRequest{InterruptID: v.Interrupts[0].ID, Value: json.RawMessage(`"ship it"`), DecidedBy: "editor"}); err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, eng, run.ID, runstate.RunSucceeded)
	if v.Outputs["approve"] != "ship it" || v.Interrupts[0].DecidedBy != "editor" {
		t.Errorf("approval output %q by %q", v.Outputs["approve"], v.Interrupts[0].DecidedBy)
	}

	// A second run on the same thread resumes every role's own session.
	second, err := eng.StartRun(ctx, engine.StartRequest{Pipeline: "research_pipeline", Inputs: map[string]any{"task": "again"}, Thread: run.Thread})
	if err != nil {
		t.Fatal(err)
	}
	v2 := waitStatus(t, eng, second.ID, runstate.RunWaiting, runstate.RunSucceeded)
	for _, a := range v2.Attempts {
		if a.NodeID == "research" && a.SessionID != v.Sessions["researcher"] {
			t.Errorf("the second run's researcher used session %s, want %s", a.SessionID, v.Sessions["researcher"])
		}
		if a.NodeID == "write" && a.SessionID != v.Sessions["writer"] {
			t.Errorf("the second run's writer used session %s, want %s", a.SessionID, v.Sessions["writer"])
		}
	}
	// The second run resumed the writer's stopped journey (no second
	// journey), and stopped it again as it settled.
	waitJourneys(t, pool, map[string]int{"stopped": 1})
}

// waitJourneys waits until the marketplace's journeys (in the test's
// database) are in the states given, as many in each.
func waitJourneys(t *testing.T, pool *pgxpool.Pool, want map[string]int) {
	t.Helper()
	var got map[string]int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		rows, err := pool.Query(context.Background(), `SELECT state, count(*)::int FROM journeys GROUP BY state`)
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int{}
		var state string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error { got[state] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(got, want) {
			return
		}
	}
	t.Fatalf("journeys by state %v, want %v", got, want)
}

func requireImage(t *testing.T, image string) {
	t.Helper()
	dockertest.RequireImage(t, image, "run `make test-images` (or `make offline-images`)")
}

// startMarketplace runs the real marketplace on dsn's database, its Claude
// Code worker on the fake agent image, and returns an executor connected to
// it, closed when the test ends.
func startMarketplace(t *testing.T, dsn string, extraArgs ...string) *marketplace.Executor {
	t.Helper()
	mp := marketplacetest.Start(t, dsn, marketplacetest.Options{Images: map[string]string{"claude_code_assistant_v1": fakeAgentImage}, Args: extraArgs})
	ex, err := marketplace.New(marketplace.Config{Endpoint: mp.Endpoint, Token: marketplacetest.Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	return ex
}

// shippedCatalog loads the orchestrator's shipped pipelines, which the end
// to end tests run on real parts.
func shippedCatalog(t *testing.T) *pipeline.Catalog {
	t.Helper()
	cat, err := pipelines.Load()
	if err != nil {
		t.Fatal(err)
	}
	return cat
}
