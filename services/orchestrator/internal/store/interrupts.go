package store

// Interrupts: approval nodes waiting for, or given, their decision.

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/jackc/pgx/v5"
)

// Interrupt is an approval node waiting for, or given, its decision: the
// API's type (package api), as the interrupts rows hold it.
type Interrupt = api.Interrupt

const interruptColumns = `id::text, run_id::text, node_id, iteration, status, value, coalesce(decided_by, ''), created_at, resumed_at`

func scanInterrupt(row pgx.Row) (Interrupt, error) {
	var i Interrupt
	var value []byte
	err := row.Scan(&i.ID, &i.RunID, &i.NodeID, &i.Iteration, &i.Status, &value, &i.DecidedBy, &i.CreatedAt, &i.ResumedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Interrupt{}, ErrNotFound
	}
	i.Value = value
	return i, err
}

// InsertInterrupt opens an interrupt for an approval node's iteration.
func InsertInterrupt(ctx context.Context, q Execer, runID, nodeID string, iteration int) error {
	// A cancelled interrupt (its run failed) opens again when the run is
	// resumed.
	_, err := q.Exec(ctx, `INSERT INTO interrupts (run_id, node_id, iteration, status) VALUES ($1, $2, $3, 'pending')
		ON CONFLICT (run_id, node_id, iteration) DO UPDATE SET status = 'pending', value = NULL, decided_by = NULL, resumed_at = NULL, created_at = now()
		WHERE interrupts.status = 'cancelled'`, runID, nodeID, iteration)
	return err
}

// InterruptRun returns the run of an interrupt, without locking anything:
// writers lock the run first, then the interrupt.
func InterruptRun(ctx context.Context, q Querier, id string) (string, error) {
	if !validUUID(id) {
		return "", ErrNotFound
	}
	var run string
	err := q.QueryRow(ctx, `SELECT run_id::text FROM interrupts WHERE id = $1`, id).Scan(&run)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return run, err
}

// LockInterrupt reads an interrupt and locks it.
func LockInterrupt(ctx context.Context, tx pgx.Tx, id string) (Interrupt, error) {
	if !validUUID(id) {
		return Interrupt{}, ErrNotFound
	}
	return scanInterrupt(tx.QueryRow(ctx, `SELECT `+interruptColumns+` FROM interrupts WHERE id = $1 FOR UPDATE`, id))
}

// ResolveInterrupt records an interrupt's decision.
func ResolveInterrupt(ctx context.Context, q Execer, id, status string, value json.RawMessage, by string) error {
	_, err := q.Exec(ctx, `UPDATE interrupts SET status = $2, value = $3, decided_by = nullif($4, ''), resumed_at = now() WHERE id = $1`, id, status, []byte(value), by)
	return err
}

// CancelInterrupts cancels a run's pending interrupts.
func CancelInterrupts(ctx context.Context, q Execer, runID string) error {
	_, err := q.Exec(ctx, `UPDATE interrupts SET status = 'cancelled', resumed_at = now() WHERE run_id = $1 AND status = 'pending'`, runID)
	return err
}

// ListInterrupts lists a run's interrupts in order.
func ListInterrupts(ctx context.Context, q Querier, runID string) ([]Interrupt, error) {
	rows, err := q.Query(ctx, `SELECT `+interruptColumns+` FROM interrupts WHERE run_id = $1 ORDER BY created_at, id`, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Interrupt, error) { return scanInterrupt(r) })
}

// PendingInterrupts lists up to limit pending interrupts of waiting runs,
// of every caller, oldest first: the candidates of an approvals inbox.
func PendingInterrupts(ctx context.Context, q Querier, limit int) ([]Interrupt, error) {
	rows, err := q.Query(ctx, `SELECT `+interruptColumns+` FROM interrupts
		WHERE status = 'pending' AND run_id IN (SELECT id FROM runs WHERE status = 'waiting')
		ORDER BY created_at, id LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Interrupt, error) { return scanInterrupt(r) })
}
