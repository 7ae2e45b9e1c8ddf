-- The marketplace journey each attempt of a role via marketplace worked
-- in: the worker whose workspace holds the node's change, which a user can
-- take out whole (GET /v1/runs/{id}/nodes/{node}/workspace), files too
-- large for a patch included. Recorded by the orchestrator, never taken
-- from a run's state, which a fork may patch. Null for other attempts and
-- for attempts recorded before.

-- +goose Up
ALTER TABLE node_attempts ADD COLUMN journey text;

-- +goose Down
ALTER TABLE node_attempts DROP COLUMN journey;
