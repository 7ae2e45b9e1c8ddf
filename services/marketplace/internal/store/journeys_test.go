package store_test

import (
	"testing"

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

// A try for a journey's lock while every lock connection is taken (by
// actions that may run for an hour) says busy at once rather than queue.
func TestTryLockWithNoConnectionFree(t *testing.T) {
	t.Parallel()
	s := store.New(pgtest.Pool(t)).WithLockConns(1)
	t.Cleanup(s.Close)
	ctx := t.Context()
	unlock, err := s.LockJourney(ctx, uuid.New())
	if err != nil {
		t.Fatal(err)
	}
	other := uuid.New()
	if _, ok, err := s.TryLockJourney(ctx, other); ok || err != nil {
		t.Fatalf("TryLockJourney with the one connection taken: ok %v, err %v; want busy", ok, err)
	}
	unlock()
	held, ok, err := s.TryLockJourney(ctx, other)
	if !ok || err != nil {
		t.Fatalf("TryLockJourney with the connection free: ok %v, err %v", ok, err)
	}
	held()
}
