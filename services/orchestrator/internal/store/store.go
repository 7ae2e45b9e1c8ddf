// Package store reads and writes the orchestrator's tables in Postgres: runs
// with their lease and fencing token, checkpoints (deltas chained to a
// parent), node attempts, role sessions and interrupts. Every function takes
// the connection or transaction to run on ([Querier]), so that the engine
// composes them into one transaction with River's job inserts.
package store

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what the store needs of a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is what the store's writes need: a Querier, or a [Batch] that
// queues them for one round trip.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Batch queues writes and sends them in one round trip ([Batch.Send]), in
// the order they were queued. Its Exec reports no rows affected: use it
// only for writes whose count does not matter.
type Batch struct{ b pgx.Batch }

// Exec queues a statement.
func (b *Batch) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// Send runs the queued statements in tx. A second result for one node
// iteration fails with ErrDuplicateResult.
func (b *Batch) Send(ctx context.Context, tx pgx.Tx) error {
	if b.b.Len() == 0 {
		return nil
	}
	return duplicateResult(tx.SendBatch(ctx, &b.b).Close())
}

func duplicateResult(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "checkpoints_node_once_idx" {
		return ErrDuplicateResult
	}
	return err
}

// ErrNotFound is returned for a run, checkpoint or interrupt that does not
// exist.
var ErrNotFound = errors.New("not found")

// ErrStaleLease is returned when a commit presents a lease or fencing token
// that is no longer the run's: another replica took the run over.
var ErrStaleLease = errors.New("the run's lease is held by another replica (stale fencing token)")

func validUUID(s string) bool {
	// Postgres would refuse a malformed uuid with an error that aborts the
	// transaction; such an id names nothing.
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}
