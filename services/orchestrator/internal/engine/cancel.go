package engine

// Ending and trimming runs: cancel, and pruning old checkpoints.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Cancel cancels a run: its pending interrupts are cancelled, its running
// nodes stopped (within a lease renewal), and no further node starts.
func (e *Engine) Cancel(ctx context.Context, runID string) (api.Run, error) {
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		run, err := lockVisible(ctx, tx, runID)
		if err != nil {
			return err
		}
		if run.Status != runstate.RunRunning && run.Status != runstate.RunWaiting {
			return fmt.Errorf("%w: run %s already %s", ErrConflict, runID, run.Status)
		}
		if err := store.CancelInterrupts(ctx, tx, runID); err != nil {
			return err
		}
		return store.UpdateRun(ctx, tx, runID, store.RunUpdate{HeadSeq: run.HeadSeq, Status: runstate.RunCancelled, Error: "cancelled"})
	})
	if err != nil {
		return api.Run{}, err
	}
	e.cache.drop(runID)
	return e.runNow(ctx, runID)
}

// Prune keeps a run's last keep checkpoints and deletes the older ones: the
// oldest kept checkpoint becomes a full snapshot, and forks that start from
// a deleted checkpoint get a snapshot of their own first, so every state
// stays reachable. It returns how many checkpoints it deleted.
func (e *Engine) Prune(ctx context.Context, runID string, keep int) (int64, error) {
	if keep < 1 {
		return 0, invalid("keep must be at least 1")
	}
	var deleted int64
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := lockVisible(ctx, tx, runID); err != nil {
			return err
		}
		cps, err := store.ListCheckpoints(ctx, tx, runID)
		if err != nil {
			return err
		}
		if len(cps) <= keep {
			return nil
		}
		cut := cps[len(cps)-keep].Seq
		children, err := store.ForkChildren(ctx, tx, runID, cut)
		if err != nil {
			return err
		}
		for _, c := range children {
			st, err := store.LoadState(ctx, tx, c.RunID, c.Seq)
			if err != nil {
				return err
			}
			if err := store.ReplaceWithSnapshot(ctx, tx, c.RunID, c.Seq, st); err != nil {
				return err
			}
		}
		st, err := store.LoadState(ctx, tx, runID, cut)
		if err != nil {
			return err
		}
		if err := store.ReplaceWithSnapshot(ctx, tx, runID, cut, st); err != nil {
			return err
		}
		deleted, err = store.DeleteCheckpointsBefore(ctx, tx, runID, cut)
		return err
	})
	return deleted, err
}
