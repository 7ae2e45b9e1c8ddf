package journeys_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/process"
	"github.com/meshwork/meshwork/workers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// quotaBundle is a manager on a database of its own and the process
// runtime (the cheapest real runtime: a worker is a directory and a record),
// with what a spawn may leave behind in reach.
type quotaBundle struct {
	mgr      *journeys.Manager
	pool     *pgxpool.Pool
	rt       *process.Runtime
	labels   map[string]string
	stateDir string // the process runtime's: workspaces/<journey uid>
	baseDir  string // the base store's: <journey uid>.git
	archives string // stop_worker's archives
}

func setupQuota(t *testing.T, perCaller, total int) *quotaBundle {
	t.Helper()
	return setupWith(t, perCaller, total, nil)
}

// setupWith is setupQuota with the runtime the manager uses wrapped by wrap
// (nil: as it is), for a test that holds a runtime call at a chosen moment.
func setupWith(t *testing.T, perCaller, total int, wrap func(workerruntime.Runtime) workerruntime.Runtime) *quotaBundle {
	t.Helper()
	b := &quotaBundle{
		pool:     pgtest.Pool(t),
		labels:   map[string]string{pgtest.Label: "journeys-" + uuid.NewString()[:8]},
		stateDir: t.TempDir(),
		baseDir:  t.TempDir(),
		archives: t.TempDir(),
	}
	var err error
	if b.rt, err = process.New(process.Config{StateDir: b.stateDir}, nil); err != nil {
		t.Fatal(err)
	}
	catalog, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	baseStore, err := bases.NewStore(b.baseDir)
	if err != nil {
		t.Fatal(err)
	}
	var rt workerruntime.Runtime = b.rt
	if wrap != nil {
		rt = wrap(rt)
	}
	b.mgr, err = journeys.New(journeys.Config{
		Catalog: catalog, Store: store.New(b.pool), Labels: b.labels, ArchiveDir: b.archives, Bases: baseStore,
		Runtimes:             map[meshtype.IsolationLevel]workerruntime.Runtime{meshtype.IsolationProcess: rt},
		MaxJourneysPerCaller: perCaller, MaxJourneys: total,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.mgr.Close)
	return b
}

func (b *quotaBundle) spawn(caller, journey, mode string) (journeys.SpawnResult, error) {
	return b.mgr.Spawn(context.Background(), caller, journeys.SpawnRequest{
		WorkerID: "filesystem_research_v1", JourneyID: journey, IsolationLevel: "process", Mode: mode,
	})
}

func (b *quotaBundle) mustSpawn(t *testing.T, caller, journey, mode string) journeys.SpawnResult {
	t.Helper()
	res, err := b.spawn(caller, journey, mode)
	if err != nil {
		t.Fatalf("spawning %s/%s (%s): %v", caller, journey, mode, err)
	}
	return res
}

func (b *quotaBundle) stop(t *testing.T, caller, journey, workspace string) {
	t.Helper()
	if _, err := b.mgr.Stop(context.Background(), caller, journeys.StopRequest{JourneyID: journey, Workspace: workspace}); err != nil {
		t.Fatalf("stopping %s/%s: %v", caller, journey, err)
	}
}

// wantQuotaRefusal checks err is the quota's refusal, word for word.
func wantQuotaRefusal(t *testing.T, err error, msg string) {
	t.Helper()
	e, ok := journeys.AsError(err)
	if !ok || e.Code != journeys.CodeResourceExhausted || e.Message != msg {
		t.Fatalf("got %v (%#v), want a %s error %q", err, e, journeys.CodeResourceExhausted, msg)
	}
}

// leftovers counts what journeys exist, in every place a spawn writes:
// rows (deleted ones included), live rows, runtime workers, workspace
// directories, and entries of the base store's directory (bases and drafts).
type leftovers struct{ rows, live, workers, workspaces, bases int }

func (b *quotaBundle) leftovers(t *testing.T) leftovers {
	t.Helper()
	ctx := context.Background()
	var l leftovers
	if err := b.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state IN ('starting', 'active')) FROM journeys`).Scan(&l.rows, &l.live); err != nil {
		t.Fatal(err)
	}
	listed, err := b.rt.List(ctx, b.labels)
	if err != nil {
		t.Fatal(err)
	}
	l.workers = len(listed)
	l.workspaces = countEntries(t, filepath.Join(b.stateDir, "workspaces"))
	l.bases = countEntries(t, b.baseDir)
	return l
}

func countEntries(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// A caller's spawn past its quota is refused, naming the limit, and leaves
// nothing behind; another caller still spawns; stopping a journey frees a
// slot; spawns that keep a journey live are never refused; a stopped
// journey's resume or fresh spawn is a new live one, refused at the limit
// without touching its workspace.
func TestSpawnQuotaPerCaller(t *testing.T) {
	t.Parallel()
	b := setupQuota(t, 10, 200)
	for i := range 10 {
		b.mustSpawn(t, "alice", fmt.Sprintf("j%d", i), "")
	}
	full := b.leftovers(t)
	if want := (leftovers{rows: 10, live: 10, workers: 10, workspaces: 10, bases: 10}); full != want {
		t.Fatalf("after 10 spawns: %+v, want %+v", full, want)
	}

	const refusal = `quota: caller "alice" has 10 live journeys, the limit (--max-journeys-per-caller) is 10; stop one with stop_worker`
	_, err := b.spawn("alice", "j10", "")
	wantQuotaRefusal(t, err, refusal)
	if got := b.leftovers(t); got != full {
		t.Errorf("the refused spawn left %+v, want %+v as before", got, full)
	}

	// Spawns that keep a live journey live pass at the limit.
	for _, mode := range []string{"normal", "resume"} {
		if res := b.mustSpawn(t, "alice", "j1", mode); res.State != "already_active" {
			t.Errorf("mode %s on a live journey: state %s, want already_active", mode, res.State)
		}
	}
	if res := b.mustSpawn(t, "alice", "j2", "fresh"); res.State != string(store.StateActive) {
		t.Errorf("mode fresh on a live journey: state %s, want active", res.State)
	}

	b.mustSpawn(t, "bob", "j0", "")

	// A stopped journey frees its slot, and takes one again to resume.
	b.stop(t, "alice", "j0", "keep")
	b.mustSpawn(t, "alice", "j10", "")
	for _, mode := range []string{"resume", "normal", "fresh"} {
		_, err = b.spawn("alice", "j0", mode)
		wantQuotaRefusal(t, err, refusal)
	}
	// The refusals left j0 stopped, its workspace there for a resume.
	var state string
	var workspace string
	if err := b.pool.QueryRow(context.Background(), `SELECT state, volume FROM journeys WHERE caller = 'alice' AND id = 'j0'`).Scan(&state, &workspace); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(workspace); state != string(store.StateStopped) || err != nil {
		t.Errorf("after refused spawns j0 is %s, workspace %s: %v; want stopped with its workspace", state, workspace, err)
	}
	b.stop(t, "alice", "j10", "delete")
	if res := b.mustSpawn(t, "alice", "j0", "resume"); res.Workspace != workspace {
		t.Errorf("resumed j0 in %s, want its workspace %s", res.Workspace, workspace)
	}
}

// The marketplace's total refuses every caller once reached.
func TestSpawnQuotaTotal(t *testing.T) {
	t.Parallel()
	b := setupQuota(t, 10, 3)
	b.mustSpawn(t, "alice", "a", "")
	b.mustSpawn(t, "alice", "b", "")
	b.mustSpawn(t, "bob", "a", "")
	full := b.leftovers(t)
	for _, caller := range []string{"alice", "bob", "carol"} {
		_, err := b.spawn(caller, "c", "")
		wantQuotaRefusal(t, err, "quota: this marketplace has 3 live journeys, the limit (--max-journeys) is 3; stop one of yours with stop_worker or try again later")
	}
	if got := b.leftovers(t); got != full {
		t.Errorf("the refused spawns left %+v, want %+v as before", got, full)
	}
	b.stop(t, "bob", "a", "delete")
	b.mustSpawn(t, "carol", "c", "")
}

// Concurrent spawns at the limit do not both pass: 8 racing for 3 slots
// leave exactly 3 live journeys, the others refused with nothing behind,
// whether the journeys are new or stopped ones resumed or started afresh.
func TestSpawnQuotaConcurrent(t *testing.T) {
	t.Parallel()
	const racers = 8
	for name, tc := range map[string]struct {
		perCaller, total int
		caller           func(i int) string
		mode             string // "": new journeys; otherwise of stopped ones
		want             leftovers
	}{
		"per caller": {
			perCaller: 3, total: 200, caller: func(int) string { return "alice" },
			want: leftovers{rows: 3, live: 3, workers: 3, workspaces: 3, bases: 3},
		},
		"total": {
			perCaller: 10, total: 3, caller: func(i int) string { return fmt.Sprintf("caller%d", i) },
			want: leftovers{rows: 3, live: 3, workers: 3, workspaces: 3, bases: 3},
		},
		"resume": {
			perCaller: 3, total: 200, caller: func(int) string { return "alice" }, mode: "resume",
			want: leftovers{rows: racers, live: 3, workers: 3, workspaces: racers, bases: racers},
		},
		"fresh": {
			perCaller: 10, total: 3, caller: func(i int) string { return fmt.Sprintf("caller%d", i) }, mode: "fresh",
			want: leftovers{rows: racers, live: 3, workers: 3, workspaces: racers, bases: racers},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupQuota(t, tc.perCaller, tc.total)
			if tc.mode != "" {
				// Stopped journeys, their workspaces kept, made one at a
				// time under the quota.
				for i := range racers {
					b.mustSpawn(t, tc.caller(i), fmt.Sprintf("j%d", i), "")
					b.stop(t, tc.caller(i), fmt.Sprintf("j%d", i), "keep")
				}
			}
			start := make(chan struct{})
			errs := make([]error, racers)
			var wg sync.WaitGroup
			for i := range racers {
				wg.Go(func() {
					<-start
					_, errs[i] = b.spawn(tc.caller(i), fmt.Sprintf("j%d", i), tc.mode)
				})
			}
			close(start)
			wg.Wait()
			spawned := 0
			for i, err := range errs {
				if err == nil {
					spawned++
					continue
				}
				if e, ok := journeys.AsError(err); !ok || e.Code != journeys.CodeResourceExhausted {
					t.Errorf("spawn %d: %v, want a quota refusal", i, err)
				}
			}
			if spawned != 3 {
				t.Errorf("%d spawns passed, want 3", spawned)
			}
			if got := b.leftovers(t); got != tc.want {
				t.Errorf("after the race: %+v, want %+v", got, tc.want)
			}
		})
	}
}
