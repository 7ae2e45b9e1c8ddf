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

// Beginner opens transactions: a pool or a connection, for the store's
// functions that make their own.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
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

// StepGuard is the run as a commit decided its step over: owner holding the
// run's lease with Fence, the run's head at Head, the run running or
// waiting.
type StepGuard struct {
	RunID, Owner string
	Fence        int64
	Head         int
}

// ErrRunMoved is returned by [Batch.SendGuarded] when the run is no longer
// as its [StepGuard] says: nothing was written.
var ErrRunMoved = errors.New("the run moved on since the step was decided")

// BatchSender is what [Batch.SendGuarded] needs of a pool or connection.
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// SendGuarded sends the queued statements in one round trip and one
// transaction (the implicit one of a batch sent outside a transaction),
// behind a statement that locks the run's row and checks g
// (orchestrator_lock_for_step): when the run moved on, it fails with
// ErrRunMoved and nothing is written. It returns the role sessions of the
// run's thread as they were before the writes, role → session, like
// LockRunForCommit. A commit so sent saves the round trips of BEGIN, the
// lock and COMMIT.
func (b *Batch) SendGuarded(ctx context.Context, db BatchSender, g StepGuard) (map[string]string, error) {
	if !validUUID(g.RunID) {
		return nil, ErrNotFound
	}
	var guarded pgx.Batch
	guarded.Queue(`SELECT orchestrator_lock_for_step($1, $2, $3, $4)`, g.RunID, g.Owner, g.Fence, g.Head)
	guarded.QueuedQueries = append(guarded.QueuedQueries, b.b.QueuedQueries...)
	br := db.SendBatch(ctx, &guarded)
	sessions := map[string]string{}
	err := br.QueryRow().Scan(&sessions)
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "MWS01" {
		return nil, ErrRunMoved
	}
	if err != nil {
		return nil, duplicateResult(err)
	}
	return sessions, nil
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
