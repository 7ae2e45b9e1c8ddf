package mcpserver_test

import (
	"archive/tar"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// poolWorker is the worker the pool tests give a warm pool.
const poolWorker = "filesystem_write_v1"

func withPool(size int) func(*meshtype.Definition) {
	return func(d *meshtype.Definition) {
		if d.ID == poolWorker {
			d.Pool.Size = size
		}
	}
}

// fillPools fills b's warm pools, as its filler does, and returns the
// pool's members (by uid, their workers' ids), failing the test unless
// there are want of them.
func fillPools(t *testing.T, b *bundle, want int) map[uuid.UUID]string {
	t.Helper()
	if err := b.mgr.FillPools(context.Background()); err != nil {
		t.Fatal(err)
	}
	members := poolRows(t, b)
	if len(members) != want {
		t.Fatalf("%d pool members after a fill, want %d", len(members), want)
	}
	return members
}

// poolRows returns the pool's members as the database has them: uid ->
// container id ("" while one is being created).
func poolRows(t *testing.T, b *bundle) map[uuid.UUID]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT uid, coalesce(container_id, '') FROM pool_members`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[uuid.UUID]string{}
	for rows.Next() {
		var uid uuid.UUID
		var id string
		if err := rows.Scan(&uid, &id); err != nil {
			t.Fatal(err)
		}
		out[uid] = id
	}
	return out
}

// poolContainers lists the test's workers labelled as pool members, in any
// state: container id -> journey label.
func poolContainers(t *testing.T, b *bundle) map[string]string {
	t.Helper()
	listed, err := b.rt.List(context.Background(), b.labels)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, w := range listed {
		out[w.ID] = w.Journey
	}
	return out
}

// A warm pool's members go to one journey each: 20 spawns at once over two
// marketplaces on one database get the pool's 4 members once each, and the
// other 16 fall back to a cold spawn without failing. A pooled worker is its
// journey's from then on (its workspace empty, or seeded from the spawn's
// source), and the pool is refilled with new workers, never given back.
func TestPoolHandsEachMemberToOneJourney(t *testing.T) {
	t.Parallel()
	const size, spawns = 4, 20
	a := setupWith(t, &bundle{adjust: withPool(size), maxPerCaller: 2 * spawns})
	b := a.replica(t)
	members := fillPools(t, a, size)
	memberContainers := map[string]bool{}
	for _, id := range members {
		if id == "" {
			t.Fatal("a filled pool has a member without a worker")
		}
		memberContainers[id] = true
	}
	if body := scrape(t, a); !strings.Contains(body, fmt.Sprintf(`meshwork_pool_members{state="ready",worker=%q} %d`+"\n", poolWorker, size)) {
		t.Errorf("/metrics does not count the pool's %d ready members", size)
	}
	// Another fill finds the pool full, here or on the other marketplace.
	fillPools(t, b, size)

	type spawned struct {
		journey, container string
		pooled             bool
	}
	results := make(chan spawned, spawns)
	var wg sync.WaitGroup
	for i := range spawns {
		cs := takeTurns(i, a, b).client(t, aliceToken)
		wg.Go(func() {
			id := fmt.Sprintf("burst-%d", i)
			res, err := cs.CallTool(context.Background(), toolParams("spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": id}))
			if err != nil {
				t.Errorf("spawn %s: %v", id, err)
				return
			}
			var out struct {
				ContainerID string `json:"container_id"`
				Pooled      bool   `json:"pooled"`
				State       string `json:"state"`
			}
			if err := decodeStructured(res, &out); err != nil || res.IsError || out.State != "active" {
				t.Errorf("spawn %s: %+v %v", id, out, err)
				return
			}
			results <- spawned{journey: id, container: out.ContainerID, pooled: out.Pooled}
		})
	}
	wg.Wait()
	close(results)
	seen := map[string]string{}
	pooled := 0
	for r := range results {
		if other, dup := seen[r.container]; dup {
			t.Errorf("journeys %s and %s got the same worker %s", other, r.journey, r.container)
		}
		seen[r.container] = r.journey
		if r.pooled {
			pooled++
			if !memberContainers[r.container] {
				t.Errorf("journey %s is reported pooled, but its worker %s was no pool member", r.journey, r.container)
			}
		} else if memberContainers[r.container] {
			t.Errorf("journey %s got pool member %s but is not reported pooled", r.journey, r.container)
		}
	}
	if len(seen) != spawns || pooled != size {
		t.Fatalf("%d distinct workers, %d from the pool; want %d, %d (the rest cold)", len(seen), pooled, spawns, size)
	}
	if n := len(poolRows(t, a)); n != 0 {
		t.Errorf("%d pool members left after the burst took them all", n)
	}
	// The spawns from the pool are counted apart, on the marketplaces
	// that made them.
	var counted int
	for _, m := range []*bundle{a, b} {
		for line := range strings.Lines(scrape(t, m)) {
			if strings.HasPrefix(line, `meshwork_spawn_duration_seconds_count{outcome="pooled",worker="`+poolWorker+`"} `) {
				var n int
				_, _ = fmt.Sscanf(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), "%d", &n)
				counted += n
			}
		}
	}
	if counted != size {
		t.Errorf("meshwork_spawn_duration_seconds counts %d pooled spawns over the two marketplaces, want %d", counted, size)
	}
	// Each journey's row names its own worker, under the member's uid.
	var distinct int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(DISTINCT container_id) FROM journeys WHERE state = 'active'`).Scan(&distinct); err != nil || distinct != spawns {
		t.Errorf("%d active journeys with distinct workers (%v), want %d", distinct, err, spawns)
	}

	// A pooled journey works like any other, from the same fresh
	// workspace as a cold one.
	var pooledJourney, coldJourney string
	for container, journey := range seen {
		if memberContainers[container] {
			pooledJourney = journey
		} else {
			coldJourney = journey
		}
	}
	cs := b.client(t, aliceToken)
	listing := func(journey string) string {
		return mustJSON(t, must(t, cs, "execute_in_worker", execArgs(journey, map[string]any{"type": "list", "target": "."}))["output"])
	}
	if p, c := listing(pooledJourney), listing(coldJourney); p != c || strings.Contains(p, `"type":"file"`) {
		t.Errorf("a pooled worker's fresh workspace lists %s; a cold one's %s", p, c)
	}
	must(t, cs, "execute_in_worker", execArgs(pooledJourney, map[string]any{"type": "write", "target": "a.txt", "content": "from the pool"}))
	got := must(t, cs, "execute_in_worker", execArgs(pooledJourney, map[string]any{"type": "read", "target": "a.txt"}))
	if content := readContent(got); content != "from the pool" {
		t.Errorf("read back %q", content)
	}

	// Refilled: new workers, none of them a journey's.
	refilled := fillPools(t, b, size)
	for uid, id := range refilled {
		if _, taken := seen[id]; taken || memberContainers[id] {
			t.Errorf("member %s reuses worker %s", uid, id)
		}
	}

	// A spawn with a source gets a pool member seeded with it.
	b64, sum := tarGz(t, []*tar.Header{{Name: "seeded.txt", Typeflag: tar.TypeReg}}, map[string]string{"seeded.txt": "seed"})
	sp := must(t, cs, "spawn_worker", map[string]any{
		"worker_id": poolWorker, "journey_id": "seeded",
		"source": map[string]any{"archive": map[string]any{"tar_gz_base64": b64, "sha256": sum}},
	})
	if sp["pooled"] != true {
		t.Fatalf("a spawn with a source on a filled pool was not pooled: %v", sp)
	}
	got = must(t, cs, "execute_in_worker", execArgs("seeded", map[string]any{"type": "read", "target": "seeded.txt"}))
	if content := readContent(got); content != "seed" {
		t.Errorf("the pooled worker's seeded file reads %q", content)
	}
	diff := must(t, cs, "workspace_diff", map[string]any{"journey_id": "seeded"})
	if p, _ := diff["patch"].(string); p != "" {
		t.Errorf("a freshly seeded pooled workspace differs from its base:\n%s", p)
	}
}

// A restart leaves no pool member unaccounted for: a worker whose row is
// gone is removed, a row whose worker is gone is dropped, a member left
// half-made by a dead marketplace is dropped, and the healthy members are
// kept and used. An expired member is replaced, not handed out.
func TestPoolRestartLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	const size = 4
	a := setupWith(t, &bundle{adjust: withPool(size)})
	ctx := context.Background()
	members := fillPools(t, a, size)
	var uids []uuid.UUID
	for uid := range members {
		uids = append(uids, uid)
	}
	rowless, workerless, expired, healthy := uids[0], uids[1], uids[2], uids[3]
	if _, err := a.pool.Exec(ctx, `DELETE FROM pool_members WHERE uid = $1`, rowless); err != nil {
		t.Fatal(err)
	}
	dockertest.Docker(t, "rm", "-fv", members[workerless])
	halfMade := uuid.New() // its marketplace died before the worker existed
	if _, err := a.pool.Exec(ctx, `INSERT INTO pool_members (uid, worker_id, definition_hash, isolation_level, state) VALUES ($1, $2, 'x', 'container', 'creating')`, halfMade, poolWorker); err != nil {
		t.Fatal(err)
	}

	a.start(t) // restart: reconcile
	after := poolRows(t, a)
	if _, ok := after[rowless]; ok {
		t.Error("a row came back for the member whose row was gone")
	}
	if st := containerState(t, a, members[rowless]); st != workerruntime.StateMissing {
		t.Errorf("the worker of a member without a row is %s after a restart, want removed", st)
	}
	if _, ok := after[workerless]; ok {
		t.Error("the member whose worker was removed is still in the pool")
	}
	if _, ok := after[halfMade]; ok {
		t.Error("the half-made member of a dead marketplace is still in the pool")
	}
	for _, uid := range []uuid.UUID{expired, healthy} {
		if after[uid] != members[uid] || containerState(t, a, members[uid]) != workerruntime.StateRunning {
			t.Errorf("healthy member %s was not kept across the restart", uid)
		}
	}

	// A member whose maker died while making it is removed by a running
	// marketplace's refill too, not only at a start.
	orphan := uuid.New()
	if _, err := a.pool.Exec(ctx, `INSERT INTO pool_members (uid, worker_id, definition_hash, isolation_level, state) VALUES ($1, $2, 'x', 'container', 'creating')`, orphan, poolWorker); err != nil {
		t.Fatal(err)
	}
	if err := a.mgr.FillPools(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := poolRows(t, a)[orphan]; ok {
		t.Error("a refill left the member of a dead maker")
	}

	// An expired member is replaced, never handed out.
	if _, err := a.pool.Exec(ctx, `UPDATE pool_members SET created_at = now() - interval '2 hours' WHERE uid = $1`, expired); err != nil {
		t.Fatal(err)
	}
	if err := a.mgr.FillPools(ctx); err != nil {
		t.Fatal(err)
	}
	after = poolRows(t, a)
	if _, ok := after[expired]; ok || containerState(t, a, members[expired]) != workerruntime.StateMissing {
		t.Error("a member past max_age is still in the pool")
	}
	if len(after) != size {
		t.Errorf("%d members after the refill, want %d", len(after), size)
	}
	// Every labelled pool worker is a member or a journey's, and every
	// member has its running worker.
	for id, journey := range poolContainers(t, a) {
		uid := uuid.MustParse(journey)
		if after[uid] != id {
			t.Errorf("worker %s (uid %s) is no pool member after the restart and refill", id, uid)
		}
	}
	for uid, id := range after {
		if containerState(t, a, id) != workerruntime.StateRunning {
			t.Errorf("member %s has no running worker", uid)
		}
	}
	cs := a.client(t, aliceToken)
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": "after-restart"})
	if sp["pooled"] != true || sp["container_id"] != members[healthy] {
		t.Errorf("the spawn after the restart took %v (pooled %v), want the oldest healthy member %s", sp["container_id"], sp["pooled"], members[healthy])
	}

	// A stopping marketplace drains the pools; the journeys' workers stay.
	left := poolRows(t, a)
	n, err := a.mgr.DrainPools(ctx)
	if err != nil || n != len(left) {
		t.Fatalf("DrainPools removed %d of %d members: %v", n, len(left), err)
	}
	if rows := poolRows(t, a); len(rows) != 0 {
		t.Errorf("%d pool members after a drain", len(rows))
	}
	for id := range poolContainers(t, a) {
		if id != members[healthy] {
			t.Errorf("worker %s survives the drain, and is no journey's", id)
		}
	}
	if st := containerState(t, a, members[healthy]); st != workerruntime.StateRunning {
		t.Errorf("the pooled journey's worker is %s after the drain, want running", st)
	}
}

// BenchmarkSpawnFromPool times, alternating in one run so that all three
// see the same machine: spawn_worker taking a warm pool member, spawn_worker
// on the drained pool (the cold path it falls back to), and `docker run -d`
// of the same image with the same hardening. Each spawn is also timed with
// its first action, a 1 KB write: the whole wait of a client that spawns
// and starts working. Refilling the pool and removal are not timed.
func BenchmarkSpawnFromPool(b *testing.B) {
	bb := setupWith(b, &bundle{adjust: withPool(1)})
	cs := bb.client(b, aliceToken)
	label := "meshwork.test=" + bb.labels["meshwork.test"]
	kb := strings.Repeat("k", 1024)
	var pooled, pooledFirst, cold, coldFirst, run []time.Duration
	spawn := func(id string, wantPooled bool) (time.Duration, time.Duration) {
		start := time.Now()
		sp := must(b, cs, "spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": id})
		spawned := time.Since(start)
		must(b, cs, "execute_in_worker", execArgs(id, map[string]any{"type": "write", "target": "1k.txt", "content": kb}))
		first := time.Since(start)
		if got := sp["pooled"] == true; got != wantPooled {
			b.Fatalf("spawn %s: pooled %v, want %v", id, got, wantPooled)
		}
		return spawned, first
	}
	for i := range b.N {
		b.StopTimer()
		if err := bb.mgr.FillPools(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		s, f := spawn(fmt.Sprintf("pooled-%d", i), true)
		pooled, pooledFirst = append(pooled, s), append(pooledFirst, f)
		s, f = spawn(fmt.Sprintf("cold-%d", i), false)
		cold, coldFirst = append(cold, s), append(coldFirst, f)

		start := time.Now()
		id := dockerRun(b, label)
		run = append(run, time.Since(start))
		b.StopTimer()
		_ = exec.Command("docker", "rm", "-fv", id).Run()
		for _, id := range []string{fmt.Sprintf("pooled-%d", i), fmt.Sprintf("cold-%d", i)} {
			must(b, cs, "stop_worker", map[string]any{"journey_id": id, "workspace": "delete"})
		}
		b.StartTimer()
	}
	b.ReportMetric(millis(percentile(pooled, 50)), "pool-p50-ms")
	b.ReportMetric(millis(percentile(pooled, 99)), "pool-p99-ms")
	b.ReportMetric(millis(percentile(pooledFirst, 50)), "pool+write1k-p50-ms")
	b.ReportMetric(millis(percentile(cold, 50)), "cold-p50-ms")
	b.ReportMetric(millis(percentile(coldFirst, 50)), "cold+write1k-p50-ms")
	b.ReportMetric(millis(percentile(run, 50)), "docker-run-p50-ms")
	b.ReportMetric(float64(percentile(pooled, 50))/float64(percentile(run, 50)), "pool/docker-run")
	b.ReportMetric(float64(percentile(cold, 50))/float64(percentile(run, 50)), "cold/docker-run")
}

// An idle journey holds no server process: its channel is closed after
// channel_idle, the worker's MCP server exits with it, and the next action
// opens a new one and finds the workspace as it was.
func TestIdleChannelsClose(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": "idle"})
	must(t, cs, "execute_in_worker", execArgs("idle", map[string]any{"type": "write", "target": "kept.txt", "content": "still here"}))
	container := sp["container_id"].(string)
	processes := func() int {
		out, err := exec.Command("docker", "top", container, "-o", "pid").Output()
		if err != nil {
			t.Fatalf("docker top: %v", err)
		}
		return len(strings.Fields(string(out))) - 1 // the header
	}
	busy := processes()
	if busy < 2 {
		t.Fatalf("%d processes in a worker with an open channel, want its idle process and its server", busy)
	}
	ctx := context.Background()
	if n := b.mgr.CloseIdleChannels(ctx, time.Now().Add(-time.Hour)); n != 0 {
		t.Errorf("closed %d channels used within the hour", n)
	}
	if n := b.mgr.CloseIdleChannels(ctx, time.Now()); n != 1 {
		t.Fatalf("closed %d idle channels, want 1", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for processes() >= busy {
		if time.Now().After(deadline) {
			t.Fatalf("the worker still runs %d processes after its channel closed", processes())
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := must(t, cs, "execute_in_worker", execArgs("idle", map[string]any{"type": "read", "target": "kept.txt"}))
	if content := readContent(got); content != "still here" {
		t.Errorf("after the channel reopened, read %q", content)
	}
}

// A marketplace restarted with other settings hands out no member made
// under the old ones: its refill retires them, with their workers, and
// makes new ones, which a spawn then claims. (Labels are the setting
// changed here; credentials and the nested URL count the same way for
// agent workers: journeys.TestMemberHashFollowsTheSettings.)
func TestPoolMembersOfOldSettingsAreRetired(t *testing.T) {
	t.Parallel()
	const size = 2
	a, old := restartedWithNewSettings(t, size)
	ctx := context.Background()
	if err := a.mgr.FillPools(ctx); err != nil {
		t.Fatal(err)
	}
	after := poolRows(t, a)
	for uid, container := range old {
		if _, ok := after[uid]; ok {
			t.Errorf("member %s, made under the old settings, is still in the pool", uid)
		}
		if st := containerState(t, a, container); st != workerruntime.StateMissing {
			t.Errorf("the worker of old member %s is %s, want removed", uid, st)
		}
	}
	if len(after) != size {
		t.Errorf("%d members after the refill, want %d new ones", len(after), size)
	}
	sp := must(t, a.client(t, aliceToken), "spawn_worker", map[string]any{"worker_id": poolWorker, "journey_id": "after-restart"})
	fresh := false
	for _, container := range after {
		fresh = fresh || container == sp["container_id"]
	}
	if sp["pooled"] != true || !fresh {
		t.Errorf("the spawn after the restart: %v, want a member made under the new settings", sp)
	}
}

// restartedWithNewSettings fills a pool of size members, then restarts the
// marketplace with other settings (labels): the members it returns are of
// the old ones, for the next refill to retire.
func restartedWithNewSettings(t *testing.T, size int) (*bundle, map[uuid.UUID]string) {
	t.Helper()
	a := setupWith(t, &bundle{adjust: withPool(size)})
	old := fillPools(t, a, size)
	a.labels["meshwork.settings"] = "second"
	a.start(t)
	return a, old
}

// A member whose worker the engine would not remove keeps its row, and a
// later pass removes it: no worker is left running that no row counts.
func TestAPoolMemberWhoseWorkerWouldNotGoIsRetiredLater(t *testing.T) {
	t.Parallel()
	a, old := restartedWithNewSettings(t, 2)
	ctx := context.Background()
	a.rt.failRemoves.Store(1)
	if err := a.mgr.FillPools(ctx); err != nil {
		t.Fatal(err)
	}
	kept := 0
	rows := poolRows(t, a)
	for uid, container := range old {
		if containerState(t, a, container) != workerruntime.StateMissing {
			kept++
			if _, ok := rows[uid]; !ok {
				t.Errorf("old member %s's worker is still there, and its row is gone: nothing will remove it", uid)
			}
		}
	}
	if kept != 1 {
		t.Fatalf("%d old workers left after one removal failed, want 1", kept)
	}
	if err := a.mgr.FillPools(ctx); err != nil {
		t.Fatal(err)
	}
	rows = poolRows(t, a)
	for uid, container := range old {
		if st := containerState(t, a, container); st != workerruntime.StateMissing {
			t.Errorf("old member %s's worker is %s after a second pass, want removed", uid, st)
		}
		if _, ok := rows[uid]; ok {
			t.Errorf("old member %s is still in the pool", uid)
		}
	}
}
