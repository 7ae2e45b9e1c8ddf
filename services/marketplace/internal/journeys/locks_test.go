package journeys

import (
	"sync"
	"testing"

	"github.com/google/uuid"
)

// The per-journey mutex excludes, and forgets a journey once nobody holds
// or waits for its lock: a marketplace that served many journeys keeps no
// entry for each.
func TestKeyedMutex(t *testing.T) {
	t.Parallel()
	var k keyedMutex
	a, b := uuid.New(), uuid.New()
	unlockA := k.lock(a)
	if _, ok := k.tryLock(a); ok {
		t.Fatal("a second holder of a's lock")
	}
	unlockB, ok := k.tryLock(b)
	if !ok {
		t.Fatal("b's lock is taken by a's")
	}
	var wg sync.WaitGroup
	in := 0
	for range 8 {
		wg.Go(func() {
			unlock := k.lock(a)
			in++ // under the lock: the race detector sees a missed exclusion
			unlock()
		})
	}
	unlockA()
	unlockB()
	wg.Wait()
	if in != 8 {
		t.Errorf("%d holders ran, want 8", in)
	}
	if n := k.size(); n != 0 {
		t.Errorf("%d journeys still have an entry, want none", n)
	}
}
