package store_test

import (
	"testing"

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
