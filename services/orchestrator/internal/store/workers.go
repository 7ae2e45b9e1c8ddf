package store

// Run workers: the workers a run's attempts started that outlive an
// attempt, to be stopped once the run settles.
//
// Recording a worker and stopping it take the worker's transaction-level
// advisory lock, so that a stop never lands between an attempt's record
// and its use of the worker: the attempt waits for the stop, then finds the
// worker stopped and starts it again.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// ErrRunSettled is returned by RecordRunWorker for a run that is neither
// running nor waiting: an attempt of a run that is over starts no worker.
var ErrRunSettled = errors.New("the run is over")

// runWorkerLockClass is the first key of a run worker's advisory lock
// (pg_advisory_xact_lock(int, int)), next to the marketplace's classes
// (0x4d570001 for journeys, 0x4d570002 for names), which may share the
// database, and the orchestrator's threads' (0x4d570004): no lock of theirs
// is ever taken for one of these.
const runWorkerLockClass int32 = 0x4d570003

// lockRunWorker takes the worker's lock until tx ends. Two workers whose
// keys meet only wait for each other.
func lockRunWorker(ctx context.Context, tx pgx.Tx, via, id string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+runWorkerLockKey+`)`, runWorkerLockClass, via, id)
	return err
}

// tryLockRunWorker takes the worker's lock until tx ends, if no one holds
// it, and reports whether it did.
func tryLockRunWorker(ctx context.Context, tx pgx.Tx, via, id string) (bool, error) {
	var locked bool
	err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+runWorkerLockKey+`)`, runWorkerLockClass, via, id).Scan(&locked)
	return locked, err
}

// runWorkerLockKey is a worker's advisory lock key, of the parameters
// class, via and id.
const runWorkerLockKey = `$1, hashtext($2 || '/' || $3)`

// RecordRunWorker records, under the worker's lock, that a run uses the
// worker id of the executor via; recording it again changes nothing. A
// run that is neither running nor waiting is refused (ErrRunSettled).
func RecordRunWorker(ctx context.Context, db Beginner, runID, via, id string) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := lockRunWorker(ctx, tx, via, id); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO run_workers (run_id, via, worker_id)
			SELECT id, $2, $3 FROM runs WHERE id = $1 AND status IN ($4, $5)
			ON CONFLICT DO NOTHING`, runID, via, id, api.RunRunning, api.RunWaiting)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var settled bool
			if err := tx.QueryRow(ctx, `SELECT status NOT IN ($2, $3) FROM runs WHERE id = $1`, runID, api.RunRunning, api.RunWaiting).Scan(&settled); err != nil {
				return err
			}
			if settled {
				return fmt.Errorf("run %s: %w", runID, ErrRunSettled)
			}
		}
		return nil
	})
}

// SettledWorker is a worker of a run that settled.
type SettledWorker struct {
	Via, ID string
}

// SettledWorkers lists up to limit workers, of the executors vias, that
// runs which are not running (ended, or waiting for a human) recorded, each
// once, in random order (workers whose stop keeps failing do not hold up
// the others): ReleaseWorker stops each.
func SettledWorkers(ctx context.Context, q Querier, vias []string, limit int) ([]SettledWorker, error) {
	rows, err := q.Query(ctx, `
		SELECT via, worker_id FROM (
			SELECT DISTINCT w.via, w.worker_id FROM run_workers w JOIN runs r ON r.id = w.run_id
			WHERE r.status <> $2 AND w.via = ANY($3)
		) settled ORDER BY random() LIMIT $1`, limit, api.RunRunning, vias)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SettledWorker, error) {
		var w SettledWorker
		err := r.Scan(&w.Via, &w.ID)
		return w, err
	})
}

// ReleaseWorker deletes, under the worker's lock, the worker's rows of runs
// that are not running, and calls stop unless a running run holds the
// worker (its row); it reports whether it called stop. A stop that fails
// deletes nothing, so that the next round tries again. A worker whose lock
// is taken (another replica stops it, a run records it) or whose rows are
// gone already (another replica released it) is left alone: no replica
// waits behind another's stop. The lock is held until stop returns: a run
// that records the worker meanwhile waits, and then starts it again.
func ReleaseWorker(ctx context.Context, db Beginner, w SettledWorker, stop func() error) (bool, error) {
	stopped := false
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if locked, err := tryLockRunWorker(ctx, tx, w.Via, w.ID); err != nil || !locked {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM run_workers w USING runs r
			WHERE r.id = w.run_id AND r.status <> $3 AND w.via = $1 AND w.worker_id = $2`, w.Via, w.ID, api.RunRunning)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		var held bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (
				SELECT 1 FROM run_workers o JOIN runs r ON r.id = o.run_id
				WHERE o.via = $1 AND o.worker_id = $2 AND r.status = $3)`, w.Via, w.ID, api.RunRunning).Scan(&held); err != nil || held {
			return err
		}
		stopped = true
		return stop()
	})
	return stopped, err
}
