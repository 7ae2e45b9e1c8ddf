-- What each node attempt was asked: its task as rendered over the run's
-- state (a command node's command), so that a run's page shows each
-- attempt's input beside its output, loop iterations included. Bounded by
-- the orchestrator (16 KiB); null for attempts recorded before.

-- +goose Up
ALTER TABLE node_attempts ADD COLUMN task text;

-- +goose Down
ALTER TABLE node_attempts DROP COLUMN task;
