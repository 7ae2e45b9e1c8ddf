// Package store keeps the marketplace's state in Postgres: journeys, the
// audit log of actions, and callers' token hashes. A restart of the
// marketplace loses nothing because nothing lives only in memory.
package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sentinel errors for callers to branch on.
var (
	// ErrNotFound: no such journey for this caller (another caller's journey
	// is not found either).
	ErrNotFound = errors.New("not found")
	// ErrExists: the caller already has a journey with that id.
	ErrExists = errors.New("already exists")
)

// Store is the marketplace's Postgres state.
type Store struct {
	pool *pgxpool.Pool

	// locks holds the journey locks (locks.go), made on first use, on at
	// most lockConns+tryConns connections.
	locksOnce sync.Once
	locks     *pgxpool.Pool
	locksErr  error
	lockConns int32
	// waiting holds a place for each waiting lock held (LockJourney,
	// LockNetwork): at most lockConns, so that tries always find one of
	// the pool's tryConns.
	waiting chan struct{}
	// lockCheck is how often a watched lock's connection is checked
	// (LockJourneyWatched).
	lockCheck time.Duration
}

// New returns a store on pool. The schema comes from the migrations module.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, lockConns: DefaultLockConns, lockCheck: DefaultLockCheck}
}

// maxLockConns bounds WithLockConns: far past what a database serves.
const maxLockConns = 1 << 16

// WithLockConns sets how many waiting journey locks (actions, spawns,
// diffs under way) the store may hold at once; n <= 0 keeps
// DefaultLockConns. Set it before the store's first lock.
func (s *Store) WithLockConns(n int) *Store {
	if n > 0 {
		s.lockConns = int32(min(n, maxLockConns)) //nolint:gosec // bounded just before
	}
	return s
}

// Ping checks the database is reachable.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *Store) exec(ctx context.Context, sql string, args ...any) error {
	return update(ctx, s.pool, sql, args...)
}

// update runs an UPDATE of one journey: ErrNotFound if there is none.
func update(ctx context.Context, db querier, sql string, args ...any) error {
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("updating journey: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}
