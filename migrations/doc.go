// Package migrations holds Meshwork's SQL schema as goose migrations, embedded
// so every binary carries them, and applies them.
//
// [Apply] takes a Postgres session advisory lock first, so several replicas of
// the marketplace or the orchestrator starting at once apply each migration
// exactly once: the others wait for the lock, then find nothing pending.
package migrations

//
// After its own migrations, Apply applies those of River, the orchestrator's
// job queue, with River's migrator: River defines its tables, and they live
// beside ours so that a node's result and its successor jobs commit in one
// transaction. Apply and Status report them as versions from
// [RiverVersionOffset].
