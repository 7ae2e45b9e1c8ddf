package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// Orphan marks only a live journey still on the worker it names: one that
// was stopped, or given another worker, since it was read stays as it is.
func TestOrphan(t *testing.T) {
	s, j := newJourney(t)
	ctx := t.Context()
	if ok, err := s.SetRunning(ctx, j.UID, "c1", "vol"); err != nil || !ok {
		t.Fatalf("SetRunning of a starting journey: %v, %v", ok, err)
	}
	state := func() store.JourneyState {
		t.Helper()
		got, err := s.JourneyByUID(ctx, j.UID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	if err := s.SetEgressAddr(ctx, j.UID, "10.0.0.7"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Orphan(ctx, j.UID, "c0", j.Spawns); err != nil || ok || state() != store.StateActive {
		t.Errorf("Orphan of another worker: %v, %v, state %s; want not done, active", ok, err, state())
	}
	if ok, err := s.Orphan(ctx, j.UID, "c1", j.Spawns-1); err != nil || ok || state() != store.StateActive {
		t.Errorf("Orphan of the journey as an earlier spawn left it: %v, %v, state %s; want not done, active", ok, err, state())
	}
	if ok, err := s.Orphan(ctx, j.UID, "c1", j.Spawns); err != nil || !ok || state() != store.StateOrphaned {
		t.Errorf("Orphan of its worker: %v, %v, state %s; want done, orphaned", ok, err, state())
	}
	// Resumed, it is live again, and its old worker's address grants
	// nothing: the orphaning cleared it.
	if err := s.Restart(ctx, "alice", j.UID, "h", store.Quota{PerCaller: 10, Total: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EgressJourney(ctx, "10.0.0.7"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the orphaned journey's egress address still grants: %v", err)
	}
	if err := s.SetState(ctx, j.UID, store.StateStopped); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Orphan(ctx, j.UID, "c1", j.Spawns); err != nil || ok || state() != store.StateStopped {
		t.Errorf("Orphan of a stopped journey: %v, %v, state %s; want not done, stopped", ok, err, state())
	}
}

// Tries for a journey's lock (the idle stopper, pool upkeep) are not
// starved by locks held for work (actions, which may run for an hour):
// with the one such lock allowed held, a try still takes another journey's
// lock, while a second lock for work, waiting or tried (a warm pool
// claim), waits for the first to end. A tried lock for work that another
// holds gives its place back at once.
func TestTryLocksAreNotStarvedByWaitingLocks(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := store.New(pool).WithLockConns(1)
	t.Cleanup(s.Close)
	ctx := t.Context()
	unlock, err := s.LockJourney(ctx, uuid.New())
	if err != nil {
		t.Fatal(err)
	}
	held, ok, err := s.TryLockJourney(ctx, uuid.New())
	if !ok || err != nil {
		t.Fatalf("TryLockJourney beside the one waiting lock allowed: ok %v, err %v; want the lock", ok, err)
	}
	held()
	// A spawn holding its journey's lock takes the egress network's lock:
	// not one more lock for work, or spawns holding all of those would
	// each wait for one more, for ever.
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	network, err := s.LockNetwork(short, "meshwork-egress")
	if err != nil {
		t.Fatalf("the network's lock while the one lock for work is held: %v", err)
	}
	network()
	short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := s.LockJourney(short, uuid.New()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second waiting lock with one allowed: %v, want it to wait (deadline exceeded)", err)
	}
	short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, _, err := s.TryLockJourneyForWork(short, uuid.New()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a tried lock for work with the one allowed held: %v, want it to wait for a place (deadline exceeded)", err)
	}
	unlock()

	other := store.New(pool)
	t.Cleanup(other.Close)
	taken := uuid.New()
	release, err := other.LockJourney(ctx, taken)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, ok, err := s.TryLockJourneyForWork(ctx, taken); ok || err != nil {
		t.Fatalf("a tried lock for work that another holds: ok %v, err %v; want not ok", ok, err)
	}
	short, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	again, err := s.LockJourney(short, uuid.New())
	if err != nil {
		t.Fatalf("a waiting lock once the first ended and a try gave its place back: %v", err)
	}
	again()
}

// A spawn and a stop_worker that did not wait for it cannot undo each
// other: a started worker is recorded only on a journey still starting, a
// stop is written only on a journey not spawned again since the stop read
// it and with no spawn under way, and a deleted journey is not restarted.
func TestSpawnAndStopDoNotUndoEachOther(t *testing.T) {
	s, j := newJourney(t)
	ctx := t.Context()
	get := func() store.Journey {
		t.Helper()
		got, err := s.JourneyByUID(ctx, j.UID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Starting: a stop that read the journey before must go round again.
	if ok, err := s.StopIf(ctx, j.UID, store.StateDeleted, 0); err != nil || ok || get().State != store.StateStarting {
		t.Fatalf("StopIf while starting: %v, %v, state %s; want not done, starting", ok, err, get().State)
	}
	if ok, err := s.SetRunning(ctx, j.UID, "c1", "vol"); err != nil || !ok {
		t.Fatalf("SetRunning of a starting journey: %v, %v", ok, err)
	}
	if ok, err := s.StopIf(ctx, j.UID, store.StateStopped, 0); err != nil || !ok || get().State != store.StateStopped {
		t.Fatalf("StopIf: %v, %v, state %s; want done, stopped", ok, err, get().State)
	}
	// Resumed: a stop that read the journey before the resume does not
	// stop the resumed worker.
	if err := s.Restart(ctx, j.Caller, j.UID, "h", store.Quota{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.SetRunning(ctx, j.UID, "c1", "vol"); err != nil || !ok {
		t.Fatalf("SetRunning of a resumed journey: %v, %v", ok, err)
	}
	if ok, err := s.StopIf(ctx, j.UID, store.StateStopped, 0); err != nil || ok || get().State != store.StateActive {
		t.Fatalf("StopIf of the journey as it was before its resume: %v, %v, state %s; want not done, active", ok, err, get().State)
	}
	if ok, err := s.StopIf(ctx, j.UID, store.StateStopped, get().Spawns); err != nil || !ok || get().State != store.StateStopped {
		t.Fatalf("StopIf of the journey as it is: %v, %v, state %s; want done, stopped", ok, err, get().State)
	}
	// A stopped journey is not recorded running again by a spawn that
	// began before the stop, nor failed by it.
	if ok, err := s.SetRunning(ctx, j.UID, "c2", "vol"); err != nil || ok || get().State != store.StateStopped || get().ContainerID != "c1" {
		t.Fatalf("SetRunning of a stopped journey: %v, %v, %+v; want not done, stopped on c1", ok, err, get())
	}
	if err := s.FailSpawn(ctx, j.UID); err != nil || get().State != store.StateStopped {
		t.Fatalf("FailSpawn of a stopped journey: %v, state %s; want stopped", err, get().State)
	}
	// Deleted stays deleted.
	if ok, err := s.StopIf(ctx, j.UID, store.StateDeleted, get().Spawns); err != nil || !ok {
		t.Fatalf("StopIf delete: %v, %v", ok, err)
	}
	// A stop that kept the workspace, ending after the delete, finds it
	// gone.
	if ok, err := s.StopIf(ctx, j.UID, store.StateStopped, get().Spawns); err != nil || ok || get().State != store.StateDeleted {
		t.Fatalf("StopIf keep after delete: %v, %v, state %s; want not done, deleted", ok, err, get().State)
	}
	if err := s.Restart(ctx, j.Caller, j.UID, "h", store.Quota{}); !errors.Is(err, store.ErrNotFound) || get().State != store.StateDeleted {
		t.Errorf("Restart of a deleted journey: %v, state %s; want ErrNotFound, deleted", err, get().State)
	}
	if err := s.Reset(ctx, j.Caller, j.UID, j.WorkerID, "h", j.IsolationLevel, store.Quota{}); !errors.Is(err, store.ErrNotFound) || get().State != store.StateDeleted {
		t.Errorf("Reset of a deleted journey: %v, state %s; want ErrNotFound, deleted", err, get().State)
	}
}

// A watched lock reports the end of its connection: another marketplace
// can take the lock then, and the holder must stop. Unlocking after the
// loss neither hangs nor fails.
func TestWatchedLockReportsItsLoss(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := store.New(pool).WithLockCheck(50 * time.Millisecond)
	t.Cleanup(s.Close)
	ctx := t.Context()
	uid := uuid.New()
	unlock, lost, err := s.LockJourneyWatched(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
		t.Fatal("lost while its connection lives")
	case <-time.After(300 * time.Millisecond):
	}
	// The lock's connection ends, as when Postgres restarts.
	pgtest.EndAdvisoryLockHolders(t, pool)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the lock's connection ended, and its loss was not reported")
	}
	other := store.New(pool)
	t.Cleanup(other.Close)
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	again, err := other.LockJourney(short, uid)
	if err != nil {
		t.Fatalf("another store taking the lost lock: %v", err)
	}
	again()
	unlock()
}
