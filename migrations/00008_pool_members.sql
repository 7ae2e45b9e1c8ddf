-- Warm pools: workers created and started ahead of any spawn, owned by no
-- journey until spawn_worker claims one. A member's uid becomes its
-- journey's uid when claimed (its container and workspace are named by it),
-- and the claim deletes the member's row in the transaction that inserts
-- the journey: a member is handed out once, by whichever marketplace wins
-- the row. A member is 'creating' while its marketplace makes its worker
-- (holding the journey lock of its uid), then 'ready'. A ready member's
-- workspace is seeded with the empty base already, recorded in the
-- marketplace's base store under its uid (base_commit), as a spawn without
-- a source would seed it.

-- +goose Up
CREATE TABLE pool_members (
    uid             uuid PRIMARY KEY,
    worker_id       text NOT NULL,
    definition_hash text NOT NULL,
    isolation_level text NOT NULL,
    state           text NOT NULL CHECK (state IN ('creating', 'ready')),
    container_id    text,
    volume          text,
    base_commit     text CHECK (base_commit ~ '^[0-9a-f]{40}$'),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pool_members_ready_idx ON pool_members (worker_id, definition_hash, created_at) WHERE state = 'ready';

-- +goose Down
DROP TABLE pool_members;
