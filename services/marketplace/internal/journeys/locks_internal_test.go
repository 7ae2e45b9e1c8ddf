package journeys

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// An action's context ends, saying why, when its journey's lock is lost
// (the lock's connection ended, so another marketplace may take the lock
// and run a second action at once); releasing it afterwards returns.
func TestAnActionStopsWhenItsLockIsLost(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := store.New(pool).WithLockCheck(50 * time.Millisecond)
	t.Cleanup(s.Close)
	m := &Manager{cfg: Config{Store: s}, logger: slog.New(slog.DiscardHandler)}
	ctx, done, err := m.lockJourneyForAction(t.Context(), uuid.New())
	if err != nil {
		t.Fatal(err)
	}
	pgtest.EndAdvisoryLockHolders(t, pool)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was lost and the action's context did not end")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errLockLost) {
		t.Errorf("cause %v, want errLockLost", cause)
	}
	done()
}
