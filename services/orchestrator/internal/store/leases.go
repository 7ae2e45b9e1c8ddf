package store

// A run's lease and fencing token: one replica works a run at a time.

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lease is a run's claimed lease.
type Lease struct {
	Fence int64
	Run   Run
	// Session is the run's thread's session of the role ClaimLease was
	// asked for, read in the same statement ("" when none).
	Session string
	// InlineJob is the job of the node the run's last holder worked
	// inline, if it did not commit it (see RunUpdate.InlineJob); nil when
	// none.
	InlineJob []byte
}

// ClaimLease takes the run's lease for owner until ttl from now, unless
// another owner holds a live one (ok false). The fencing token is raised at
// every claim that is not a renewal of owner's live lease.
//
// It also reads the session of role on the run's thread, which the node
// about to run resumes: one round trip for both.
func ClaimLease(ctx context.Context, q Querier, runID, owner string, ttl time.Duration, role string) (Lease, bool, error) {
	var l Lease
	if !validUUID(runID) {
		return Lease{}, false, ErrNotFound
	}
	row := q.QueryRow(ctx, `UPDATE runs SET lease_owner = $2, lease_expires_at = now() + $3 * interval '1 millisecond',
			fence = CASE WHEN lease_owner = $2 AND lease_expires_at > now() THEN fence ELSE fence + 1 END
		WHERE id = $1 AND (lease_owner IS NULL OR lease_owner = $2 OR lease_expires_at <= now())
		RETURNING fence, coalesce((SELECT session_id FROM role_sessions s WHERE s.thread = runs.thread AND s.role = $4), ''), inline_job, `+runColumns,
		runID, owner, ttl.Milliseconds(), role)
	err := row.Scan(append([]any{&l.Fence, &l.Session, &l.InlineJob}, runFields(&l.Run)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := GetRun(ctx, q, runID); err != nil {
			return Lease{}, false, err
		}
		return Lease{}, false, nil
	}
	return l, err == nil, err
}

// LockRunForCommit locks a run's row like LockRun and checks, in the same
// statement, that owner still holds its lease with fence: ErrStaleLease if
// not. It also reads the role sessions of the run's thread, role → session: a commit that goes on with
// a successor knows its session without another statement.
func LockRunForCommit(ctx context.Context, tx pgx.Tx, id, owner string, fence int64) (Run, map[string]string, error) {
	if !validUUID(id) {
		return Run{}, nil, ErrNotFound
	}
	var r Run
	var held bool
	sessions := map[string]string{}
	err := tx.QueryRow(ctx, `SELECT `+runColumns+`, coalesce(lease_owner = $2 AND fence = $3, false),
			coalesce((SELECT jsonb_object_agg(role, session_id) FROM role_sessions s WHERE s.thread = runs.thread), '{}')
		FROM runs WHERE id = $1 FOR UPDATE`, id, owner, fence).Scan(
		append(runFields(&r), &held, &sessions)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, nil, ErrNotFound
	}
	if err == nil && !held {
		err = ErrStaleLease
	}
	return r, sessions, err
}

// ReleaseLease gives up owner's lease on a run if it still holds it with
// fence.
func ReleaseLease(ctx context.Context, q Execer, runID, owner string, fence int64) error {
	_, err := q.Exec(ctx, `UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1 AND lease_owner = $2 AND fence = $3`, runID, owner, fence)
	return err
}

// RenewLeases extends owner's leases on the given runs and returns the
// status of each run it still holds: a run missing from the result was taken
// over, one not running was cancelled or ended.
func RenewLeases(ctx context.Context, q Querier, owner string, runIDs []string, ttl time.Duration) (map[string]string, error) {
	rows, err := q.Query(ctx, `UPDATE runs SET lease_expires_at = now() + $3 * interval '1 millisecond'
		WHERE id = ANY($2::uuid[]) AND lease_owner = $1 RETURNING id::text, status`, owner, runIDs, ttl.Milliseconds())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var id, status string
	_, err = pgx.ForEachRow(rows, []any{&id, &status}, func() error { out[id] = status; return nil })
	return out, err
}

// LeaseLive reports whether some replica holds a live lease on the run.
func LeaseLive(ctx context.Context, q Querier, runID string) (bool, error) {
	if !validUUID(runID) {
		return false, nil
	}
	var live bool
	err := q.QueryRow(ctx, `SELECT coalesce(lease_expires_at > now(), false) FROM runs WHERE id = $1`, runID).Scan(&live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return live, err
}

// UnheldInlineJobs returns, for at most limit running or waiting runs whose
// lease is free or expired, the job of the node their last holder worked
// inline (see RunUpdate.InlineJob): nobody works those nodes, and they may
// have no job of their own.
func UnheldInlineJobs(ctx context.Context, q Querier, limit int) ([][]byte, error) {
	rows, err := q.Query(ctx, `SELECT inline_job FROM runs
		WHERE inline_job IS NOT NULL AND status IN ('running', 'waiting') AND (lease_expires_at IS NULL OR lease_expires_at <= now())
		LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[[]byte])
}
