-- The orchestrator's state: pipeline runs, their checkpoints (deltas chained
-- to a parent, so a fork copies nothing), node attempts, the agent sessions
-- of each role, and interrupts (approvals). River's job tables sit beside
-- these (applied by River's own migrator), so that a node's result, its
-- checkpoint and its successor jobs commit in one transaction.

-- +goose Up
CREATE TABLE runs (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    pipeline          text        NOT NULL,
    -- The definition's hash when the run started: a resume refuses a
    -- pipeline that changed, unless asked to migrate.
    pipeline_hash     text        NOT NULL,
    -- Runs on one thread share their roles' agent sessions.
    thread            text        NOT NULL CHECK (thread <> ''),
    caller            text        NOT NULL DEFAULT '',
    status            text        NOT NULL CHECK (status IN ('running', 'waiting', 'succeeded', 'failed', 'cancelled')),
    error             text,
    -- The latest checkpoint.
    head_seq          integer     NOT NULL DEFAULT 0,
    forked_from_run   uuid        REFERENCES runs (id) ON DELETE SET NULL,
    forked_from_seq   integer,
    -- One writer at a time: the replica holding the lease, until when, and
    -- the fencing token, raised at every new claim; a commit must present
    -- the token it claimed with.
    lease_owner       text,
    lease_expires_at  timestamptz,
    fence             bigint      NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);

CREATE INDEX runs_created_idx ON runs (created_at DESC, id DESC);
CREATE INDEX runs_thread_idx ON runs (thread);

-- A checkpoint is a delta over its parent: the same run's previous
-- checkpoint, or for the first checkpoint of a fork the checkpoint it was
-- forked from. A checkpoint without a parent is a full snapshot.
CREATE TABLE checkpoints (
    run_id            uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq               integer     NOT NULL CHECK (seq >= 0),
    parent_run        uuid,
    parent_seq        integer,
    -- The node whose result this checkpoint records (null for the start of a
    -- run, a fork, an approval, a cancel), and its iteration.
    node_id           text,
    iteration         integer,
    delta             jsonb       NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq),
    FOREIGN KEY (parent_run, parent_seq) REFERENCES checkpoints (run_id, seq) DEFERRABLE INITIALLY DEFERRED
);

-- A node's result is committed once per iteration, whatever replicas crash.
CREATE UNIQUE INDEX checkpoints_node_once_idx ON checkpoints (run_id, node_id, iteration) WHERE node_id IS NOT NULL;
-- Forks' first checkpoints, by where they start (pruning looks for them);
-- a run's own chain needs no index beyond the primary key.
CREATE INDEX checkpoints_fork_idx ON checkpoints (parent_run, parent_seq) WHERE parent_run <> run_id;

CREATE TABLE node_attempts (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node_id           text        NOT NULL,
    iteration         integer     NOT NULL,
    attempt           integer     NOT NULL,
    -- The River job that ran it, and the replica.
    job_id            bigint,
    replica           text        NOT NULL,
    status            text        NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'abandoned')),
    error             text,
    session_id        text,
    cost_usd          numeric(14, 6),
    started_at        timestamptz NOT NULL DEFAULT now(),
    heartbeat_at      timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);

CREATE INDEX node_attempts_run_idx ON node_attempts (run_id, id);

-- The latest agent session of each role on a thread. It is written as soon
-- as the agent names it, so a crash in the middle of a node resumes it.
CREATE TABLE role_sessions (
    thread            text        NOT NULL,
    role              text        NOT NULL,
    session_id        text        NOT NULL CHECK (session_id <> ''),
    run_id            uuid        NOT NULL,
    node_id           text        NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread, role)
);

CREATE TABLE interrupts (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    run_id            uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node_id           text        NOT NULL,
    iteration         integer     NOT NULL,
    status            text        NOT NULL CHECK (status IN ('pending', 'resumed', 'cancelled')),
    value             jsonb,
    decided_by        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    resumed_at        timestamptz,
    UNIQUE (run_id, node_id, iteration)
);

CREATE INDEX interrupts_pending_idx ON interrupts (run_id) WHERE status = 'pending';

-- +goose Down
DROP TABLE interrupts;
DROP TABLE role_sessions;
DROP TABLE node_attempts;
DROP TABLE checkpoints;
DROP TABLE runs;
