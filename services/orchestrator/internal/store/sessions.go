package store

// Role sessions: the agent session of each role on a thread.

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// ThreadUsedByOthers reports whether a run of another caller than caller
// is on thread: its role sessions are that caller's.
func ThreadUsedByOthers(ctx context.Context, q Querier, thread, caller string) (bool, error) {
	var used bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE thread = $1 AND caller <> $2)`, thread, caller).Scan(&used)
	return used, err
}

// threadLockClass is the first key of a thread's advisory lock, beside
// runWorkerLockClass.
const threadLockClass int32 = 0x4d570004

// LockThread takes thread's lock until tx ends: the transactions that put
// runs on a thread, or set runs of it going again, take turns.
func LockThread(ctx context.Context, tx pgx.Tx, thread string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, threadLockClass, thread)
	return err
}

// WorkingOnThread returns a run other than except that works on thread
// (ok false when none does): one that is running, or one that settled
// (cancelled, or failed in another branch) whose attempts still run under
// its lease. Take the thread's lock (LockThread) first.
func WorkingOnThread(ctx context.Context, q Querier, thread, except string) (run api.Run, ok bool, err error) {
	err = q.QueryRow(ctx, `SELECT id::text, status, caller FROM runs
		WHERE thread = $1 AND id::text <> $3 AND (status = $2 OR (lease_owner IS NOT NULL AND lease_expires_at > now()))
		ORDER BY created_at LIMIT 1`, thread, api.RunRunning, except).Scan(&run.ID, &run.Status, &run.Caller)
	if errors.Is(err, pgx.ErrNoRows) {
		return api.Run{}, false, nil
	}
	return run, err == nil, err
}

// RoleSession reads a role's session on a thread ("" when it has none).
func RoleSession(ctx context.Context, q Querier, thread, role string) (string, error) {
	var id string
	err := q.QueryRow(ctx, `SELECT session_id FROM role_sessions WHERE thread = $1 AND role = $2`, thread, role).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return id, err
}

// SaveRoleSession records a role's session on a thread, if the run's lease
// is still owner's with fence (a stale replica cannot overwrite it); it
// reports whether it did.
func SaveRoleSession(ctx context.Context, q Execer, thread, role, session, runID, nodeID, owner string, fence int64) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO role_sessions (thread, role, session_id, run_id, node_id)
		SELECT $1, $2, $3, $4, $5 FROM runs WHERE id = $4 AND lease_owner = $6 AND fence = $7
		ON CONFLICT (thread, role) DO UPDATE SET session_id = excluded.session_id, run_id = excluded.run_id, node_id = excluded.node_id, updated_at = now()`,
		thread, role, session, runID, nodeID, owner, fence)
	return tag.RowsAffected() > 0, err
}

// SessionSeeded reports whether a thread's session of role is still the one
// a fork seeded it with (SeedRoleSessions): no node of the thread has
// worked in it yet, and the run it came from may still.
func SessionSeeded(ctx context.Context, q Querier, thread, role, session string) (bool, error) {
	var seeded bool
	err := q.QueryRow(ctx, `SELECT node_id = '' FROM role_sessions WHERE thread = $1 AND role = $2 AND session_id = $3`, thread, role, session).Scan(&seeded)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return seeded, err
}

// SeedRoleSessions gives a new thread the sessions of a state (a fork).
func SeedRoleSessions(ctx context.Context, q Execer, thread, runID string, sessions map[string]string) error {
	for role, s := range sessions {
		if _, err := q.Exec(ctx, `INSERT INTO role_sessions (thread, role, session_id, run_id, node_id) VALUES ($1, $2, $3, $4, '')
			ON CONFLICT (thread, role) DO NOTHING`, thread, role, s, runID); err != nil {
			return err
		}
	}
	return nil
}

// ListRoleSessions lists a thread's role sessions.
func ListRoleSessions(ctx context.Context, q Querier, thread string) (map[string]string, error) {
	rows, err := q.Query(ctx, `SELECT role, session_id FROM role_sessions WHERE thread = $1`, thread)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var role, id string
	_, err = pgx.ForEachRow(rows, []any{&role, &id}, func() error { out[role] = id; return nil })
	return out, err
}
