-- The node a replica works inline, without a job of its own (see the
-- orchestrator's nodeWorker.Work): the job it would have had. The commit
-- that hands the node over writes it, the node's own commit clears it, and
-- whoever claims the run's lease afresh (the replica that worked it died or
-- stopped) schedules it, so that no step is lost.

-- +goose Up
ALTER TABLE runs ADD COLUMN inline_job jsonb;

-- +goose Down
ALTER TABLE runs DROP COLUMN inline_job;
