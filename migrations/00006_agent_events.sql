-- What the agents of a run's nodes did while they ran (their tool calls,
-- with the gate's decisions), as their workers reported them: run events
-- for watchers (meshctl run --watch, the SSE stream), kept in Postgres
-- because any replica may run the node and any may serve the watcher.

-- +goose Up
CREATE TABLE agent_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node_id     text        NOT NULL,
    kind        text        NOT NULL,
    tool        text,
    text        text,
    -- Set on pre_tool events: the gate's decision and its violations.
    allowed     boolean,
    violations  jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX agent_events_run_idx ON agent_events (run_id, id);

-- +goose Down
DROP TABLE agent_events;
