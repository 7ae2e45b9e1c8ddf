package engine

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// reapLoop runs reap every ReapInterval until ctx ends. Every replica
// reaps (not only River's leader, which may be the replica that died): a
// takeover job's args name the job it replaces, so River inserts it once.
//
// River marks a job stuck in the running state as retryable only after
// RescueStuckJobsAfter (an hour: it cannot tell a dead worker from a long
// node); a run's lease tells sooner. A running node job whose run has had
// no live lease for a lease's time belongs to a replica that died: the
// reaper inserts a takeover job for the same node, which resumes it with
// the role's saved session. When River finally rescues the old job, it
// finds the node done.
func (e *Engine) reapLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	every(ctx, e.cfg.ReapInterval, func() {
		if _, err := e.reap(ctx); err != nil && ctx.Err() == nil {
			e.logger.WarnContext(ctx, "reaping the jobs of dead replicas failed", slog.Any("error", err))
		}
	})
}

// releaseLoop stops the workers of settled runs every ReapInterval until
// ctx ends, apart from reapLoop: a stop can take a while (it ends the
// action under way), and takeovers must not wait for it.
func (e *Engine) releaseLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	every(ctx, e.cfg.ReapInterval, func() {
		if _, err := e.release(ctx); err != nil && ctx.Err() == nil {
			e.logger.WarnContext(ctx, "stopping the workers of settled runs failed; their idle timeout stops them", slog.Any("error", err))
		}
	})
}

// releaseBatch is how many workers of settled runs one round takes.
const releaseBatch = 100

// releaseTimeout bounds one worker's stop.
const releaseTimeout = 2 * time.Minute

// release stops the workers that runs which settled (ended, or wait for a
// human) had started (Request.OnWorker) and that no running run holds, by
// their executors (executor.Releaser), and returns how many it stopped.
// Only the workers of executors this replica has are released. A worker
// whose stop fails keeps its rows, and the next round tries again; a later
// attempt starts it again either way.
func (e *Engine) release(ctx context.Context) (int, error) {
	releasers := map[pipeline.Via]executor.Releaser{}
	var vias []string
	for via, ex := range e.cfg.Executors {
		if r, ok := ex.(executor.Releaser); ok {
			releasers[via] = r
			vias = append(vias, string(via))
		}
	}
	if len(vias) == 0 {
		return 0, nil
	}
	stopped := 0
	defer func() {
		if stopped > 0 {
			e.logger.InfoContext(ctx, "stopped the workers of settled runs", slog.Int("workers", stopped))
		}
	}()
	for {
		taken, err := store.SettledWorkers(ctx, e.pool, vias, releaseBatch)
		if err != nil {
			return stopped, err
		}
		var errs []error
		before := stopped
		for _, w := range taken {
			r := releasers[pipeline.Via(w.Via)]
			done, err := store.ReleaseWorker(ctx, e.pool, w, func() error {
				stopCtx, cancel := context.WithTimeout(ctx, releaseTimeout)
				defer cancel()
				return r.Release(stopCtx, w.ID)
			})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if done {
				stopped++
			}
		}
		// A full batch that stopped nothing (another replica holds its
		// workers, running runs hold them) would be listed again at once:
		// the next round takes it up.
		if err := errors.Join(errs...); err != nil || len(taken) < releaseBatch || stopped == before {
			return stopped, err
		}
	}
}

// every calls f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		f()
	}
}

// reap inserts takeover jobs for the node jobs of dead replicas, and the
// jobs of inline nodes nobody works (reapInline), and returns how many it
// inserted.
func (e *Engine) reap(ctx context.Context) (int, error) {
	n, err := e.reapInline(ctx)
	if err != nil {
		return n, err
	}
	m, err := e.reapJobs(ctx)
	return n + m, err
}

// reapInline inserts the job of each node a replica was working inline on
// a run whose lease is now free or expired: the replica died or stopped,
// and whatever would have scheduled the node on a fresh claim of the run
// (a takeover, River's retry of the chain's job) may never come, say when
// that retry found its own node committed. River refuses a job it has
// (unique args), and a job whose node is committed ends at once.
func (e *Engine) reapInline(ctx context.Context) (int, error) {
	jobs, err := store.UnheldInlineJobs(ctx, e.pool, 1000)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, job := range jobs {
		inserted, err := e.insertInlineJob(ctx, job)
		if err != nil {
			return n, err
		}
		if inserted {
			n++
		}
	}
	return n, nil
}

// reapJobs inserts takeover jobs for the node jobs of dead replicas and
// returns how many it inserted.
func (e *Engine) reapJobs(ctx context.Context) (int, error) {
	res, err := e.river.JobList(ctx, river.NewJobListParams().Kinds(nodeArgs{}.Kind()).States(rivertype.JobStateRunning).First(1000))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, j := range res.Jobs {
		if j.AttemptedAt == nil || time.Since(*j.AttemptedAt) < e.cfg.LeaseTTL {
			continue
		}
		var a nodeArgs
		if err := json.Unmarshal(j.EncodedArgs, &a); err != nil {
			continue
		}
		live, err := store.LeaseLive(ctx, e.pool, a.RunID)
		if err != nil {
			return n, err
		}
		if live {
			continue
		}
		t := a
		t.Takeover = j.ID
		r, err := e.river.Insert(ctx, t, nil)
		if err != nil {
			return n, err
		}
		if !r.UniqueSkippedAsDuplicate {
			n++
			e.logger.InfoContext(ctx, "took over a node of a dead replica", slog.String("run", a.RunID), slog.String("node", a.NodeID),
				slog.Int64("job", j.ID), slog.Any("replica", j.AttemptedBy))
		}
	}
	return n, nil
}
