package store

// Checkpoints: deltas chained to a parent, and a run's state folded from them.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// Checkpoint is one row of checkpoints, as the API sends it.
type Checkpoint = api.Checkpoint

// InsertCheckpoint inserts a checkpoint. A second result for the same node
// and iteration of a run fails with ErrDuplicateResult.
func InsertCheckpoint(ctx context.Context, q Execer, c Checkpoint) error {
	delta, err := json.Marshal(c.Delta)
	if err != nil {
		return err
	}
	var parentRun any
	if c.ParentRun != "" {
		parentRun = c.ParentRun
	}
	var node, iteration any
	if c.NodeID != "" {
		node, iteration = c.NodeID, c.Iteration
	}
	_, err = q.Exec(ctx, `INSERT INTO checkpoints (run_id, seq, parent_run, parent_seq, node_id, iteration, delta) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		c.RunID, c.Seq, parentRun, c.ParentSeq, node, iteration, delta)
	return duplicateResult(err)
}

// ErrDuplicateResult is returned for a second result of one node iteration.
var ErrDuplicateResult = errors.New("this node's result for this iteration is already committed")

// ListCheckpoints lists a run's own checkpoints in order.
func ListCheckpoints(ctx context.Context, q Querier, runID string) ([]Checkpoint, error) {
	return ListCheckpointsAfter(ctx, q, runID, -1)
}

// ListCheckpointsAfter lists a run's own checkpoints after seq, in order.
func ListCheckpointsAfter(ctx context.Context, q Querier, runID string, after int) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT run_id::text, seq, coalesce(parent_run::text, ''), parent_seq, coalesce(node_id, ''), coalesce(iteration, 0), delta, created_at, pg_column_size(delta)
		FROM checkpoints WHERE run_id = $1 AND seq > $2 ORDER BY seq`, runID, after)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		var c Checkpoint
		var delta []byte
		err := r.Scan(&c.RunID, &c.Seq, &c.ParentRun, &c.ParentSeq, &c.NodeID, &c.Iteration, &delta, &c.CreatedAt, &c.Bytes)
		if err == nil {
			err = json.Unmarshal(delta, &c.Delta)
		}
		return c, err
	})
}

// RecentCheckpoints lists a run's newest checkpoints, newest first, at most
// limit, without their deltas (Delta is empty; Bytes is set): what a page
// that lists them needs, at a cost that does not grow with the run.
func RecentCheckpoints(ctx context.Context, q Querier, runID string, limit int) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT run_id::text, seq, coalesce(parent_run::text, ''), parent_seq, coalesce(node_id, ''), coalesce(iteration, 0), created_at, pg_column_size(delta)
		FROM checkpoints WHERE run_id = $1 ORDER BY seq DESC LIMIT $2`, runID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		var c Checkpoint
		err := r.Scan(&c.RunID, &c.Seq, &c.ParentRun, &c.ParentSeq, &c.NodeID, &c.Iteration, &c.CreatedAt, &c.Bytes)
		return c, err
	})
}

// LoadState folds the deltas of the chain that ends at checkpoint (runID,
// seq), following parents across forks.
func LoadState(ctx context.Context, q Querier, runID string, seq int) (runstate.State, error) {
	rows, err := q.Query(ctx, `WITH RECURSIVE chain AS (
			SELECT parent_run, parent_seq, delta, 0 AS depth FROM checkpoints WHERE run_id = $1 AND seq = $2
			UNION ALL
			SELECT c.parent_run, c.parent_seq, c.delta, chain.depth + 1
			FROM checkpoints c JOIN chain ON c.run_id = chain.parent_run AND c.seq = chain.parent_seq
		) SELECT delta FROM chain ORDER BY depth DESC`, runID, seq)
	if err != nil {
		return runstate.State{}, err
	}
	var st runstate.State
	n := 0
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&raw}, func() error {
		n++
		var d runstate.State
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decoding a checkpoint: %w", err)
		}
		st.Apply(d)
		return nil
	})
	if err != nil {
		return runstate.State{}, err
	}
	if n == 0 {
		return runstate.State{}, fmt.Errorf("checkpoint %d of run %s: %w", seq, runID, ErrNotFound)
	}
	return st, nil
}

// ForkChildren lists the first checkpoints of forks that start from a
// checkpoint of runID before seq.
func ForkChildren(ctx context.Context, q Querier, runID string, before int) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT run_id::text, seq, parent_seq FROM checkpoints WHERE parent_run = $1 AND parent_seq < $2 AND parent_run <> run_id`, runID, before)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		var c Checkpoint
		err := r.Scan(&c.RunID, &c.Seq, &c.ParentSeq)
		c.ParentRun = runID
		return c, err
	})
}

// ReplaceWithSnapshot turns a checkpoint into a full snapshot with no
// parent, so the checkpoints before it can be deleted.
func ReplaceWithSnapshot(ctx context.Context, q Querier, runID string, seq int, st runstate.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `UPDATE checkpoints SET delta = $3, parent_run = NULL, parent_seq = NULL WHERE run_id = $1 AND seq = $2`, runID, seq, b)
	return err
}

// DeleteCheckpointsBefore deletes a run's checkpoints before seq and returns
// how many.
func DeleteCheckpointsBefore(ctx context.Context, q Querier, runID string, seq int) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM checkpoints WHERE run_id = $1 AND seq < $2`, runID, seq)
	return tag.RowsAffected(), err
}

// CheckpointBytes is the stored size of checkpoints: their number and the
// bytes of their rows (pg_column_size of the whole row).
func CheckpointBytes(ctx context.Context, q Querier) (count, bytes int64, err error) {
	err = q.QueryRow(ctx, `SELECT count(*), coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c`).Scan(&count, &bytes)
	return count, bytes, err
}

// CheckpointCreatedAt returns when a checkpoint was committed.
func CheckpointCreatedAt(ctx context.Context, q Querier, runID string, seq int) (time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, `SELECT created_at FROM checkpoints WHERE run_id = $1 AND seq = $2`, runID, seq).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return at, ErrNotFound
	}
	return at, err
}
