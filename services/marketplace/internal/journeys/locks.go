package journeys

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/google/uuid"
)

// lockJourney takes a journey's lock: one action at a time on a journey,
// its counters read and its action recorded under it, across every
// marketplace on the database (store.LockJourney). Within this process the
// waiters queue on a mutex first, so that a journey has at most one
// connection waiting for or holding its lock here.
func (m *Manager) lockJourney(ctx context.Context, uid uuid.UUID) (unlock func(), err error) {
	unlock, _, err = m.takeLock(ctx, uid, false)
	return unlock, err
}

// lockJourneyForAction is lockJourney for an action, which may hold the
// lock for an hour: the returned context is ctx, cancelled with
// errLockLost if the lock's database connection ends meanwhile (another
// marketplace may take the lock then). done releases the lock.
func (m *Manager) lockJourneyForAction(ctx context.Context, uid uuid.UUID) (actx context.Context, done func(), err error) {
	unlock, lost, err := m.takeLock(ctx, uid, true)
	if err != nil {
		return nil, nil, err
	}
	actx, cancel := context.WithCancelCause(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-lost:
			m.logger.WarnContext(ctx, "the journey's lock was lost while an action ran: its database connection ended", slog.String("journey", uid.String()))
			cancel(errLockLost)
		case <-actx.Done():
		}
	}()
	return actx, func() {
		cancel(nil)
		<-watching
		unlock()
	}, nil
}

// takeLock takes the journey's lock in this process, then on the database,
// watched (store.LockJourneyWatched: lost is closed if it is lost) or not
// (lost is nil).
func (m *Manager) takeLock(ctx context.Context, uid uuid.UUID, watched bool) (unlock func(), lost <-chan struct{}, err error) {
	local := m.local.lock(uid)
	var shared func()
	if watched {
		shared, lost, err = m.cfg.Store.LockJourneyWatched(ctx, uid)
	} else {
		shared, err = m.cfg.Store.LockJourney(ctx, uid)
	}
	if err != nil {
		local()
		return nil, nil, unavailable("the journey's lock could not be taken: %v", err)
	}
	return func() { shared(); local() }, lost, nil
}

// errLockLost cancels an action whose journey lock was lost.
var errLockLost = errors.New("the journey's lock was lost while the action ran (its database connection ended); the action was stopped and may have partly run")

// tryLockJourney is lockJourney without the wait, for a lock held a
// moment: ok is false while an action runs on the journey, here or on
// another marketplace.
func (m *Manager) tryLockJourney(ctx context.Context, uid uuid.UUID) (unlock func(), ok bool, err error) {
	return m.tryLock(ctx, uid, m.cfg.Store.TryLockJourney)
}

// tryLockJourneyForWork is tryLockJourney for a holder that then works
// under the lock: a warm pool claim, which goes on to spawn
// (store.TryLockJourneyForWork).
func (m *Manager) tryLockJourneyForWork(ctx context.Context, uid uuid.UUID) (unlock func(), ok bool, err error) {
	return m.tryLock(ctx, uid, m.cfg.Store.TryLockJourneyForWork)
}

func (m *Manager) tryLock(ctx context.Context, uid uuid.UUID, shared func(context.Context, uuid.UUID) (func(), bool, error)) (unlock func(), ok bool, err error) {
	local, ok := m.local.tryLock(uid)
	if !ok {
		return nil, false, nil
	}
	release, ok, err := shared(ctx, uid)
	if err != nil || !ok {
		local()
		return nil, false, err
	}
	return func() { release(); local() }, true, nil
}

// keyedMutex is a mutex per journey, forgotten when nobody holds or waits
// for it.
type keyedMutex struct {
	mu      sync.Mutex
	entries map[uuid.UUID]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int // holders and waiters
}

func (k *keyedMutex) entry(uid uuid.UUID) *keyedEntry {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.entries == nil {
		k.entries = map[uuid.UUID]*keyedEntry{}
	}
	e := k.entries[uid]
	if e == nil {
		e = &keyedEntry{}
		k.entries[uid] = e
	}
	e.refs++
	return e
}

func (k *keyedMutex) release(uid uuid.UUID, e *keyedEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(k.entries, uid)
	}
}

func (k *keyedMutex) lock(uid uuid.UUID) (unlock func()) {
	e := k.entry(uid)
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.release(uid, e)
	}
}

func (k *keyedMutex) tryLock(uid uuid.UUID) (unlock func(), ok bool) {
	e := k.entry(uid)
	if !e.mu.TryLock() {
		k.release(uid, e)
		return nil, false
	}
	return func() {
		e.mu.Unlock()
		k.release(uid, e)
	}, true
}

// size is how many journeys have a holder or a waiter here.
func (k *keyedMutex) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.entries)
}
