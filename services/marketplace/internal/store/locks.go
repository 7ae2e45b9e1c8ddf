package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultLockConns bounds the locks held for work (actions, spawns, warm
// pool claims, diffs) at once, per marketplace (WithLockConns changes it):
// each holds a database connection for its duration, on a pool of their
// own so that holders never starve the queries they make. One past it
// waits for one to end.
const DefaultLockConns = 32

// tryConns are the lock pool's connections past the share of locks held
// for work, kept for tries (TryLockJourney: the idle stopper, the
// idle-channel closer, pool upkeep, reconciliation), which take a lock for
// a moment or not at all: they are never starved by actions that may run
// an hour.
const tryConns = 4

// The first keys of the marketplace's advisory locks
// (pg_advisory_lock(int, int), a key space apart from one-key locks such as
// River's): a journey's, and a network's (LockNetwork).
const (
	journeyLockClass int32 = 0x4d570001
	nameLockClass    int32 = 0x4d570002
)

func journeyLockKey(uid uuid.UUID) int32 { return lockKey(uid[:]) }

func lockKey(b []byte) int32 {
	h := fnv.New32a()
	_, _ = h.Write(b)
	return int32(h.Sum32()) //nolint:gosec // a hash: the wrap is intended
}

// LockNetwork takes the lock of a Docker network shared by every
// marketplace on the database (the egress network), which two marketplaces
// starting at once would otherwise both create; as LockJourney, but held a
// moment, by a spawn that holds its journey's lock: it does not count
// against the locks held for work, or spawns holding all of those would
// each wait for one more.
func (s *Store) LockNetwork(ctx context.Context, network string) (unlock func(), err error) {
	unlock, _, err = s.advisoryLock(ctx, nameLockClass, lockKey([]byte("network/"+network)), lockOptions{})
	return unlock, err
}

// lockPool is the pool journey locks are held on, made on first use with
// the store's settings.
func (s *Store) lockPool(ctx context.Context) (*pgxpool.Pool, error) {
	s.locksOnce.Do(func() {
		cfg := s.pool.Config()
		cfg.MaxConns, cfg.MinConns = s.lockConns+tryConns, 0
		s.locks, s.locksErr = pgxpool.NewWithConfig(context.WithoutCancel(ctx), cfg)
		s.waiting = make(chan struct{}, s.lockConns)
	})
	return s.locks, s.locksErr
}

// LockJourney takes the journey's lock, shared by every marketplace on the
// database: it waits while another holds it, and is held until unlock is
// called or this process dies (Postgres drops a lost connection's locks).
// It is what keeps one action at a time on a journey across replicas, and
// its counters read and written by one holder at a time.
func (s *Store) LockJourney(ctx context.Context, uid uuid.UUID) (unlock func(), err error) {
	unlock, _, err = s.advisoryLock(ctx, journeyLockClass, journeyLockKey(uid), lockOptions{counted: true})
	return unlock, err
}

// DefaultLockCheck is how often a watched lock's connection is checked
// (WithLockCheck changes it).
const DefaultLockCheck = 5 * time.Second

// WithLockCheck sets how often a watched lock's connection is checked
// (LockJourneyWatched); 0 or less keeps DefaultLockCheck.
func (s *Store) WithLockCheck(d time.Duration) *Store {
	if d > 0 {
		s.lockCheck = d
	}
	return s
}

// LockJourneyWatched is LockJourney for a holder that works under the lock
// for long (an action): lost is closed if the lock's connection ends while
// it is held (Postgres restarted, the connection was killed), when the
// lock is gone with it and another may take it; the holder should stop.
// The connection is checked every WithLockCheck.
func (s *Store) LockJourneyWatched(ctx context.Context, uid uuid.UUID) (unlock func(), lost <-chan struct{}, err error) {
	return s.advisoryLock(ctx, journeyLockClass, journeyLockKey(uid), lockOptions{counted: true, watched: true})
}

// TryLockJourney is LockJourney without the wait, for a lock held a
// moment: ok is false while another holds the lock. It does not count
// against the share of locks held for work (DefaultLockConns).
func (s *Store) TryLockJourney(ctx context.Context, uid uuid.UUID) (unlock func(), ok bool, err error) {
	return s.tryLock(ctx, uid, false)
}

// TryLockJourneyForWork is TryLockJourney for a holder that then works
// under the lock (a warm pool claim, which goes on to spawn): it counts
// against the share of locks held for work, waiting for a place there, not
// for the lock.
func (s *Store) TryLockJourneyForWork(ctx context.Context, uid uuid.UUID) (unlock func(), ok bool, err error) {
	return s.tryLock(ctx, uid, true)
}

func (s *Store) tryLock(ctx context.Context, uid uuid.UUID, counted bool) (unlock func(), ok bool, err error) {
	unlock, _, err = s.advisoryLock(ctx, journeyLockClass, journeyLockKey(uid), lockOptions{try: true, counted: counted})
	if errors.Is(err, errLockHeld) {
		return nil, false, nil
	}
	return unlock, err == nil, err
}

var errLockHeld = errors.New("journey lock held")

// lockOptions say how advisoryLock takes a lock.
type lockOptions struct {
	// try: do not wait (errLockHeld when another holds it).
	try bool
	// counted: a lock held for work, which first takes a place among the
	// lockConns that may be held at once; the others use the connections
	// left.
	counted bool
	// watched: check the lock's connection while it is held, and report
	// its end (LockJourneyWatched).
	watched bool
}

// advisoryLock takes the lock (class, key) on a connection of the lock
// pool, as opts say. lost is nil unless opts.watched.
func (s *Store) advisoryLock(ctx context.Context, class, key int32, opts lockOptions) (unlock func(), lost <-chan struct{}, err error) {
	pool, err := s.lockPool(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("advisory lock: %w", err)
	}
	query, leave := `SELECT pg_try_advisory_lock($1, $2)`, func() {}
	if !opts.try {
		query = `SELECT true FROM pg_advisory_lock($1, $2)`
	}
	if opts.counted {
		select {
		case s.waiting <- struct{}{}:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("advisory lock: waiting for one of the %d held at once to end: %w", cap(s.waiting), ctx.Err())
		}
		leave = func() { <-s.waiting }
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		leave()
		return nil, nil, fmt.Errorf("advisory lock: %w", err)
	}
	var got bool
	if err := c.QueryRow(ctx, query, class, key).Scan(&got); err != nil {
		// Cancelled, the lock may have been granted all the same: the
		// connection goes, and its locks with it.
		_ = c.Hijack().Close(context.WithoutCancel(ctx))
		leave()
		return nil, nil, fmt.Errorf("advisory lock: %w", err)
	}
	if !got {
		c.Release()
		leave()
		return nil, nil, errLockHeld
	}
	stopWatch := func() {}
	if opts.watched {
		lost, stopWatch = s.watch(c)
	}
	return func() {
		stopWatch() // the connection is this goroutine's again
		defer leave()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var released bool
		if err := c.QueryRow(ctx, `SELECT pg_advisory_unlock($1, $2)`, class, key).Scan(&released); err != nil || !released {
			_ = c.Hijack().Close(ctx)
			return
		}
		c.Release()
	}, lost, nil
}

// lockPingTimeout bounds a watched lock's ping.
const lockPingTimeout = 30 * time.Second

// watch pings a held lock's connection every lockCheck until stop is
// called, closing lost when a ping fails: the connection, and the lock with
// it, is gone. stop returns at once: a ping under way is cut off, which
// ends the connection (pgx closes a connection whose query is cut off),
// and the lock with it, which is what the unlock that calls stop wants.
func (s *Store) watch(c *pgxpool.Conn) (lost <-chan struct{}, stop func()) {
	gone, done := make(chan struct{}), make(chan struct{})
	ctx, quit := context.WithCancel(context.Background())
	go func() {
		defer close(done)
		t := time.NewTicker(s.lockCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A database slow to answer has not lost the lock: the ping
			// is given long.
			pctx, cancel := context.WithTimeout(ctx, lockPingTimeout)
			err := c.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				close(gone)
				return
			}
		}
	}()
	return gone, func() {
		quit()
		<-done
	}
}

// Close closes the pool the journey locks are held on.
func (s *Store) Close() {
	s.locksOnce.Do(func() {}) // none made after this
	if s.locks != nil {
		s.locks.Close()
	}
}
