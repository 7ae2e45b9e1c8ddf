-- The address of a live egress worker on the egress network, by which any
-- marketplace's egress proxy knows the worker behind a connection: the
-- grants live here rather than in one replica's memory. At most one journey
-- holds an address; a stopped journey's is cleared.

-- +goose Up
ALTER TABLE journeys ADD COLUMN egress_addr text;
CREATE UNIQUE INDEX journeys_egress_addr_idx ON journeys (egress_addr) WHERE egress_addr IS NOT NULL;

-- +goose Down
DROP INDEX journeys_egress_addr_idx;
ALTER TABLE journeys DROP COLUMN egress_addr;
