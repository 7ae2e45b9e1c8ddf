-- The node a replica works inline, without a job of its own (see the
-- orchestrator's nodeWorker.Work): the job it would have had. The commit
-- that hands the node over writes it, the node's own commit clears it, and
-- whoever claims the run's lease afresh (the replica that worked it died or
-- stopped) schedules it, and so does every replica's reaper for a run whose
-- lease is free or expired, so that no step is lost.

-- +goose Up
ALTER TABLE runs ADD COLUMN inline_job jsonb;
-- The reaper's sweep: runs whose inline node may have lost its worker.
CREATE INDEX runs_inline_job_idx ON runs (lease_expires_at) WHERE inline_job IS NOT NULL;

-- +goose Down
DROP INDEX runs_inline_job_idx;
ALTER TABLE runs DROP COLUMN inline_job;
