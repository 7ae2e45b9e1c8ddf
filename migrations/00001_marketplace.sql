-- The marketplace's state: callers' tokens, journeys (one worker instance and
-- its workspace each) and the audit log of every action, allowed or refused.

-- +goose Up
CREATE TABLE api_tokens (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The caller identity the token authenticates as.
    caller            text        NOT NULL CHECK (caller <> ''),
    -- Only the SHA-256 of a token is stored, never the token.
    token_sha256      bytea       NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    -- Set for tokens handed to an agent: they may act on journeys nested
    -- under this one only.
    parent_journey    uuid,
    created_at        timestamptz NOT NULL DEFAULT now(),
    revoked_at        timestamptz
);

CREATE TABLE journeys (
    -- Internal id: container and volume labels carry it, so journey ids
    -- chosen by different callers never collide.
    uid               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    caller            text        NOT NULL,
    id                text        NOT NULL CHECK (id <> ''),
    worker_id         text        NOT NULL,
    definition_hash   text        NOT NULL,
    state             text        NOT NULL CHECK (state IN ('starting', 'active', 'stopped', 'orphaned', 'failed', 'deleted')),
    isolation_level   text        NOT NULL,
    container_id      text,
    volume            text,
    parent_journey    uuid REFERENCES journeys (uid),
    agent_session_id  text,
    action_count      bigint      NOT NULL DEFAULT 0 CHECK (action_count >= 0),
    cost_usd          numeric(14, 6) NOT NULL DEFAULT 0 CHECK (cost_usd >= 0),
    created_at        timestamptz NOT NULL DEFAULT now(),
    last_used_at      timestamptz NOT NULL DEFAULT now(),
    stopped_at        timestamptz
);

-- A caller's journey ids are unique among its journeys that are not deleted:
-- a deleted journey keeps its row (and its audit trail), and its id can be
-- used again.
CREATE UNIQUE INDEX journeys_caller_id_idx ON journeys (caller, id) WHERE state <> 'deleted';

CREATE INDEX journeys_live_idx ON journeys (state, last_used_at) WHERE state IN ('starting', 'active');

-- Every action, allowed or refused. Journeys are never deleted (a deleted one
-- keeps its row in state 'deleted'), so the audit trail stays whole.
CREATE TABLE actions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    journey_uid       uuid        NOT NULL REFERENCES journeys (uid),
    caller            text        NOT NULL,
    worker_id         text        NOT NULL,
    definition_hash   text        NOT NULL,
    action_type       text        NOT NULL,
    target            text,
    decision          text        NOT NULL CHECK (decision IN ('allowed', 'refused', 'failed')),
    violations        jsonb       NOT NULL DEFAULT '[]'::jsonb,
    error             text,
    duration_us       bigint      NOT NULL DEFAULT 0,
    request_bytes     bigint      NOT NULL DEFAULT 0,
    response_bytes    bigint      NOT NULL DEFAULT 0,
    cost_usd          numeric(14, 6),
    trace_id          text,
    created_at        timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX actions_journey_idx ON actions (journey_uid, id);
CREATE INDEX actions_refused_idx ON actions (created_at) WHERE decision = 'refused';

-- +goose Down
DROP TABLE actions;
DROP TABLE journeys;
DROP TABLE api_tokens;
