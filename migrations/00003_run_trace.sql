-- A pipeline run is one trace, whichever replica works its nodes and however
-- long it waits: the run keeps the W3C trace context (traceparent,
-- tracestate) of the request that created it, and every node attempt, after
-- a crash, a takeover or an approval as well, continues that trace. Runs
-- created before this migration have none, and their nodes start traces of
-- their own.

-- +goose Up
ALTER TABLE runs
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate  text;

-- +goose Down
ALTER TABLE runs
    DROP COLUMN tracestate,
    DROP COLUMN traceparent;
