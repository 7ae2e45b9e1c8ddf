-- The workers a run's attempts started that outlive an attempt (a
-- marketplace role's journey). Once the run settles (it ended, or it waits
-- for a human) the orchestrator stops them, workspace kept, and deletes the
-- rows: a run that is over no longer holds its caller's journey quota at
-- the marketplace until the workers' idle timeout. A worker is recorded
-- before it is spawned, so that a crash after the spawn still stops it.

-- +goose Up
CREATE TABLE run_workers (
    run_id    uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    via       text NOT NULL,
    worker_id text NOT NULL,
    PRIMARY KEY (run_id, via, worker_id)
);

-- Whether another run that still runs holds the same worker.
CREATE INDEX run_workers_worker_idx ON run_workers (via, worker_id);

-- +goose Down
DROP TABLE run_workers;
