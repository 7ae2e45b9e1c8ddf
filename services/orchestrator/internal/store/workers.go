package store

// Run workers: the workers a run's attempts started that outlive an
// attempt, to be stopped once the run settles.

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// RecordRunWorker records that a run uses the worker id of the executor
// via; recording it again changes nothing.
func RecordRunWorker(ctx context.Context, q Execer, runID, via, id string) error {
	_, err := q.Exec(ctx, `INSERT INTO run_workers (run_id, via, worker_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, runID, via, id)
	return err
}

// SettledWorker is a worker of a run that settled.
type SettledWorker struct {
	Via, ID string
}

// TakeSettledWorkers deletes the rows of up to limit workers of runs that
// are not running (ended, or waiting for a human), and returns the workers
// no running run holds, once each: the caller stops them. A worker another
// running run holds is that run's to stop when it settles. Rows another
// replica is taking are skipped.
func TakeSettledWorkers(ctx context.Context, q Querier, limit int) ([]SettledWorker, error) {
	rows, err := q.Query(ctx, `
		WITH settled AS (
			SELECT w.run_id, w.via, w.worker_id FROM run_workers w JOIN runs r ON r.id = w.run_id
			WHERE r.status <> $2
			LIMIT $1 FOR UPDATE OF w SKIP LOCKED
		), taken AS (
			DELETE FROM run_workers w USING settled s
			WHERE w.run_id = s.run_id AND w.via = s.via AND w.worker_id = s.worker_id
			RETURNING w.via, w.worker_id
		)
		SELECT DISTINCT t.via, t.worker_id FROM taken t
		WHERE NOT EXISTS (
			SELECT 1 FROM run_workers o JOIN runs r ON r.id = o.run_id
			WHERE o.via = t.via AND o.worker_id = t.worker_id AND r.status = $2
		)
		ORDER BY t.via, t.worker_id`, limit, api.RunRunning)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SettledWorker, error) {
		var w SettledWorker
		err := r.Scan(&w.Via, &w.ID)
		return w, err
	})
}
