-- The coding loop: a journey may start from a source (a git repository the
-- marketplace fetched, an archive, or another journey's base plus a patch).
-- The marketplace keeps its own record of that base, outside the worker's
-- reach: the commit in its base repository (base_commit), the git source's
-- commit it descends from (base_origin, for bundles), and what the source
-- was (never credentials, archives or patches themselves). Journeys from
-- before this migration have none: their diffs ask for a fresh spawn.

-- +goose Up
ALTER TABLE journeys
    ADD COLUMN base_commit text CHECK (base_commit ~ '^[0-9a-f]{40}$'),
    ADD COLUMN base_origin text CHECK (base_origin ~ '^[0-9a-f]{40}$'),
    ADD COLUMN source      jsonb;

-- +goose Down
ALTER TABLE journeys
    DROP COLUMN source,
    DROP COLUMN base_origin,
    DROP COLUMN base_commit;
