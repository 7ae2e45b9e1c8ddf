package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// Two marketplaces on one database serve the same journeys: concurrent
// clients spread over both never take a journey past max_actions, every
// action is audited once, and a restart of one (its reconciliation) leaves
// the other's workers alone.
func TestReplicasShareJourneyLimits(t *testing.T) {
	t.Parallel()
	const (
		journeys   = 3
		maxActions = 25
		clients    = 12
		perClient  = 12 // 144 attempts for 75 allowed actions
	)
	a := setupWith(t, &bundle{adjust: func(d *meshtype.Definition) {
		if d.ID == "filesystem_write_v1" {
			d.Constraints.MaxActions = maxActions
		}
	}})
	b := a.replica(t)

	setupClient := a.client(t, aliceToken)
	for i := range journeys {
		must(t, setupClient, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": fmt.Sprintf("shared-%d", i)})
	}

	var executed, refused [journeys]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients*perClient)
	for c := range clients {
		cs := takeTurns(c, a, b).client(t, aliceToken)
		wg.Go(func() {
			for i := range perClient {
				j := (c + i) % journeys
				res, err := cs.CallTool(context.Background(), toolParams("execute_in_worker", execArgs(fmt.Sprintf("shared-%d", j), map[string]any{"type": "list", "target": "."})))
				if err != nil {
					errs <- err
					continue
				}
				var out struct {
					Executed   bool                 `json:"executed"`
					Violations []meshtype.Violation `json:"violations"`
				}
				if err := decodeStructured(res, &out); err != nil {
					errs <- err
					continue
				}
				switch {
				case out.Executed:
					executed[j].Add(1)
				case len(out.Violations) == 1 && out.Violations[0].ConstraintID == "max_actions":
					refused[j].Add(1)
				default:
					errs <- fmt.Errorf("journey %d: %+v", j, out)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for j := range journeys {
		if n := executed[j].Load(); n != maxActions {
			t.Errorf("journey %d: %d actions executed over two marketplaces, want exactly max_actions (%d)", j, n, maxActions)
		}
		st := must(t, setupClient, "get_worker_state", map[string]any{"journey_id": fmt.Sprintf("shared-%d", j)})
		if st["action_count"] != float64(maxActions) {
			t.Errorf("journey %d: action_count %v, want %d", j, st["action_count"], maxActions)
		}
	}
	// Each call is audited once, allowed or refused.
	var audited, allowed int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE decision = 'allowed') FROM actions WHERE action_type = 'list'`).Scan(&audited, &allowed); err != nil {
		t.Fatal(err)
	}
	if audited != clients*perClient || allowed != journeys*maxActions {
		t.Errorf("audit: %d rows, %d allowed; want %d rows, %d allowed", audited, allowed, clients*perClient, journeys*maxActions)
	}

	// A restarted marketplace reconciles: the other's workers are live
	// journeys, left running.
	b.start(t)
	for j := range journeys {
		st := must(t, setupClient, "get_worker_state", map[string]any{"journey_id": fmt.Sprintf("shared-%d", j)})
		if st["state"] != string(store.StateActive) {
			t.Errorf("journey %d after the other marketplace restarted: %v, want active", j, st["state"])
		}
	}
}

// replica starts a second marketplace on b's database, runtime and labels,
// with a store of its own (its own journey locks).
func (b *bundle) replica(t *testing.T) *bundle {
	t.Helper()
	r := *b
	r.store = store.New(b.pool)
	t.Cleanup(r.store.Close)
	r.start(t)
	return &r
}

// takeTurns returns a for an even i and b for an odd one: the replica the
// i-th of many concurrent callers uses, so that they spread evenly over the
// two.
func takeTurns(i int, a, b *bundle) *bundle {
	if i%2 == 1 {
		return b
	}
	return a
}

// decodeStructured decodes a result's structured content (a refused
// action's too, which is an error result).
func decodeStructured(res *mcp.CallToolResult, v any) error {
	if res.StructuredContent == nil {
		e, _ := meshapi.ErrorOf(res)
		return fmt.Errorf("no structured content: %s: %s", e.Code, e.Message)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// A marketplace starting up while another spawns a journey (its worker
// created, its row not yet updated) leaves that worker alone: the spawn
// holds the journey's lock. Once the lock is free, the half-spawned
// journey is stale: its worker is removed and it is orphaned.
func TestReconcileLeavesASpawnUnderWay(t *testing.T) {
	t.Parallel()
	a := setup(t)
	uid, container, unlock := midSpawn(t, a, a.client(t, aliceToken), "midway")
	b := a.replica(t) // starts, reconciles
	if st := containerState(t, b, container); st != workerruntime.StateRunning {
		t.Fatalf("the worker of a spawn under way is %s after another marketplace started, want running", st)
	}
	var state string
	if err := a.pool.QueryRow(context.Background(), `SELECT state FROM journeys WHERE uid = $1`, uid).Scan(&state); err != nil || state != "starting" {
		t.Fatalf("journey state %q (%v), want starting", state, err)
	}

	unlock() // the spawner died
	b.start(t)
	if st := containerState(t, b, container); st != workerruntime.StateMissing {
		t.Errorf("the stale spawn's worker is %s, want removed", st)
	}
	if err := a.pool.QueryRow(context.Background(), `SELECT state FROM journeys WHERE uid = $1`, uid).Scan(&state); err != nil || state != "orphaned" {
		t.Errorf("journey state %q (%v), want orphaned", state, err)
	}
}

// A replica that keeps running sweeps a spawn another replica died in the
// middle of: not while the spawn holds the journey's lock, and once the
// lock is free (the spawner is gone), its worker is removed and the journey
// orphaned, so that a resume brings it back.
func TestARunningReplicaSweepsAnAbandonedSpawn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := setup(t)
	cs := a.client(t, aliceToken)
	uid, container, unlock := midSpawn(t, a, cs, "abandoned")
	journeyState := func() string {
		t.Helper()
		var state string
		if err := a.pool.QueryRow(ctx, `SELECT state FROM journeys WHERE uid = $1`, uid).Scan(&state); err != nil {
			t.Fatal(err)
		}
		return state
	}

	if n, err := a.mgr.SweepAbandonedSpawns(ctx); err != nil || n != 0 {
		t.Fatalf("a sweep during the spawn orphaned %d (%v), want 0", n, err)
	}
	if st := containerState(t, a, container); st != workerruntime.StateRunning {
		t.Fatalf("the worker of a spawn under way is %s after a sweep, want running", st)
	}
	if st := journeyState(); st != "starting" {
		t.Fatalf("journey state %q after a sweep during its spawn, want starting", st)
	}

	unlock() // the spawner died
	if n, err := a.mgr.SweepAbandonedSpawns(ctx); err != nil || n != 1 {
		t.Fatalf("a sweep after the spawner died orphaned %d (%v), want 1", n, err)
	}
	if st := containerState(t, a, container); st != workerruntime.StateMissing {
		t.Errorf("the abandoned spawn's worker is %s, want removed", st)
	}
	if st := journeyState(); st != "orphaned" {
		t.Errorf("journey state %q, want orphaned", st)
	}
	if n, err := a.mgr.SweepAbandonedSpawns(ctx); err != nil || n != 0 {
		t.Errorf("a second sweep orphaned %d (%v), want 0", n, err)
	}
	res := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "abandoned", "mode": "resume"})
	if res["state"] != "active" {
		t.Errorf("resuming the swept journey: %v, want active", res)
	}
	must(t, cs, "execute_in_worker", execArgs("abandoned", map[string]any{"type": "write", "target": "after.txt", "content": "resumed"}))

	// A spawn that died with its worker recorded and running (a claimed
	// pool member's, being seeded): nobody will make it the journey's.
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "claimed"})
	container, _ = sp["container_id"].(string)
	if _, err := a.pool.Exec(ctx, `UPDATE journeys SET state = 'starting' WHERE id = 'claimed'`); err != nil {
		t.Fatal(err)
	}
	if n, err := a.mgr.SweepAbandonedSpawns(ctx); err != nil || n != 1 {
		t.Fatalf("a sweep of a spawn that died with its worker running orphaned %d (%v), want 1", n, err)
	}
	if st := containerState(t, a, container); st != workerruntime.StateMissing {
		t.Errorf("the dead spawn's running worker is %s, want removed", st)
	}
}

// midSpawn spawns journey id and leaves it as another marketplace's spawn
// under way would: starting, its worker made but not recorded, its lock
// held by that marketplace until unlock (the spawner dies).
func midSpawn(t *testing.T, a *bundle, cs *mcp.ClientSession, id string) (uid uuid.UUID, container string, unlock func()) {
	t.Helper()
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": id})
	container, _ = sp["container_id"].(string)
	if err := a.pool.QueryRow(context.Background(), `UPDATE journeys SET state = 'starting', container_id = NULL WHERE id = $1 RETURNING uid`, id).Scan(&uid); err != nil {
		t.Fatal(err)
	}
	spawner := store.New(a.pool) // another marketplace, mid-spawn
	t.Cleanup(spawner.Close)
	held, ok, err := spawner.TryLockJourney(context.Background(), uid)
	if err != nil || !ok {
		t.Fatalf("taking the journey's lock: %v %v", ok, err)
	}
	unlock = sync.OnceFunc(held)
	t.Cleanup(unlock) // before spawner.Close, which waits for it
	return uid, container, unlock
}

func containerState(t *testing.T, b *bundle, id string) workerruntime.State {
	t.Helper()
	st, err := b.rt.State(context.Background(), workerruntime.Handle{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// BenchmarkSharedJourneys measures what the shared journey locks cost:
// 20 clients run reads on 5 shared journeys through one marketplace, then
// spread over two on the same database, alternating in one run. Each
// iteration is 400 reads per setting.
func BenchmarkSharedJourneys(b *testing.B) {
	const (
		journeys = 5
		clients  = 20
		reads    = 400
	)
	a := setupWith(b, &bundle{})
	r := *a
	r.store = store.New(a.pool)
	b.Cleanup(r.store.Close)
	r.start(b)
	cs := a.client(b, aliceToken)
	for j := range journeys {
		id := fmt.Sprintf("load-%d", j)
		must(b, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": id})
		must(b, cs, "execute_in_worker", execArgs(id, map[string]any{"type": "write", "target": "1k.txt", "content": strings.Repeat("k", 1024)}))
	}
	sessions := func(replicas ...*bundle) []*mcp.ClientSession {
		out := make([]*mcp.ClientSession, clients)
		for c := range out {
			out[c] = replicas[c%len(replicas)].client(b, aliceToken)
		}
		return out
	}
	one, two := sessions(a), sessions(a, &r)
	run := func(css []*mcp.ClientSession) (time.Duration, []time.Duration) {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		start := time.Now()
		for c, s := range css {
			wg.Go(func() {
				for i := c; i < reads; i += clients {
					t0 := time.Now()
					must(b, s, "execute_in_worker", execArgs(fmt.Sprintf("load-%d", i%journeys), map[string]any{"type": "read", "target": "1k.txt"}))
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return time.Since(start), lat
	}
	run(one) // opens the channels
	run(two)
	var oneT, twoT time.Duration
	var oneLat, twoLat []time.Duration
	b.ResetTimer()
	for range b.N {
		d, l := run(one)
		oneT, oneLat = oneT+d, append(oneLat, l...)
		d, l = run(two)
		twoT, twoLat = twoT+d, append(twoLat, l...)
	}
	b.ReportMetric(float64(reads*b.N)/oneT.Seconds(), "one-reads/s")
	b.ReportMetric(float64(reads*b.N)/twoT.Seconds(), "two-reads/s")
	b.ReportMetric(millis(percentile(oneLat, 99)), "one-p99-ms")
	b.ReportMetric(millis(percentile(twoLat, 99)), "two-p99-ms")
	b.ReportMetric(oneT.Seconds()/twoT.Seconds(), "two/one-throughput")
}

// A journey whose worker one marketplace replaced (mode fresh) is served
// by the other in its new container: the other's channel to the old
// worker is not used again.
func TestReplicaFollowsAReplacedWorker(t *testing.T) {
	t.Parallel()
	a := setup(t)
	b := a.replica(t)
	ca, cb := a.client(t, aliceToken), b.client(t, aliceToken)
	first := must(t, ca, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "replaced"})
	must(t, cb, "execute_in_worker", execArgs("replaced", map[string]any{"type": "write", "target": "a.txt", "content": "old"}))
	second := must(t, ca, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "replaced", "mode": "fresh"})
	if first["container_id"] == second["container_id"] {
		t.Fatalf("mode fresh kept the container %v", first["container_id"])
	}
	res := call(t, cb, "execute_in_worker", execArgs("replaced", map[string]any{"type": "write", "target": "a.txt", "content": "new"}))
	if res.isError || res.out["executed"] != true {
		t.Fatalf("the other marketplace after the worker was replaced: %s", res.text)
	}
}
