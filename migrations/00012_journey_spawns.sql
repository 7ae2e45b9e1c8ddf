-- How many times a journey's worker was started again (spawn mode resume or
-- fresh): stop_worker does not wait for an action, so a spawn may begin while
-- it stops, and the stop writes its state only if the journey was not
-- spawned again since it read it. A worker's id alone cannot tell: the
-- process runtime names a journey's worker by the journey.

-- +goose Up
ALTER TABLE journeys ADD COLUMN spawns bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE journeys DROP COLUMN spawns;
