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
	if err := s.SetRunning(ctx, j.UID, "c1", "vol"); err != nil {
		t.Fatal(err)
	}
	state := func() store.JourneyState {
		t.Helper()
		got, err := s.JourneyByUID(ctx, j.UID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}
	if ok, err := s.Orphan(ctx, j.UID, "c0"); err != nil || ok || state() != store.StateActive {
		t.Errorf("Orphan of another worker: %v, %v, state %s; want not done, active", ok, err, state())
	}
	if ok, err := s.Orphan(ctx, j.UID, "c1"); err != nil || !ok || state() != store.StateOrphaned {
		t.Errorf("Orphan of its worker: %v, %v, state %s; want done, orphaned", ok, err, state())
	}
	if err := s.SetState(ctx, j.UID, store.StateStopped); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Orphan(ctx, j.UID, "c1"); err != nil || ok || state() != store.StateStopped {
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
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
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
