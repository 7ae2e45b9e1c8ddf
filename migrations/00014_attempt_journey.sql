-- The marketplace journey each attempt of a role via marketplace worked
-- in, and the digest of the workspace it left there: a user can take the
-- node's change out whole (GET /v1/runs/{id}/nodes/{node}/workspace), files
-- too large for a patch included, for as long as the journey's workspace
-- still has that digest. Recorded by the orchestrator, never taken from a
-- run's state, which a fork may patch. Null for other attempts and for
-- attempts recorded before.

-- +goose Up
ALTER TABLE node_attempts ADD COLUMN journey text, ADD COLUMN change_digest text;

-- +goose Down
ALTER TABLE node_attempts DROP COLUMN journey, DROP COLUMN change_digest;
