package store

// The limits on live journeys, checked under one lock as a journey is
// admitted.

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Quota bounds the live journeys: those in state starting or active, which
// hold a worker or are getting one. A stopped journey that keeps its
// workspace is not live, nor is an orphaned, failed or deleted one. A zero
// limit is no limit.
type Quota struct {
	// PerCaller is the most live journeys one caller may have.
	PerCaller int
	// Total is the most live journeys in the database, all callers together.
	Total int
}

// QuotaError is a refused admission: one more live journey would pass a
// limit of the Quota.
type QuotaError struct {
	// Caller is the caller whose spawn was refused.
	Caller string
	// Total: the limit reached is Quota.Total; otherwise Quota.PerCaller.
	Total bool
	// Live is what the limit counts now: the caller's live journeys, or all
	// of them. Limit is the limit.
	Live, Limit int
}

func (e *QuotaError) Error() string {
	if e.Total {
		return fmt.Sprintf("%d live journeys, the limit is %d", e.Live, e.Limit)
	}
	return fmt.Sprintf("caller %q has %d live journeys, the limit is %d", e.Caller, e.Live, e.Limit)
}

// quotaLock is taken by every admission until its transaction ends. One
// lock for the whole database, not one per caller: every admission counts
// the total, so every admission has to exclude every other one anyway. The
// counting and the change that makes a journey live are a few milliseconds;
// creating the worker happens after the commit.
const quotaLock = `SELECT pg_advisory_xact_lock(hashtext('meshwork_journey_quota'))`

// admit runs fn, which makes journey uid of caller live (uuid.Nil: a journey
// fn inserts), in a transaction that first checks q under quotaLock. So two
// admissions at the limit cannot both pass: the second counts after the
// first has committed. A journey that is live already is admitted whatever
// the counts: it is counted once, now and after.
func (s *Store) admit(ctx context.Context, caller string, uid uuid.UUID, q Quota, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if q != (Quota{}) {
			if _, err := tx.Exec(ctx, quotaLock); err != nil {
				return fmt.Errorf("taking the quota lock: %w", err)
			}
			if err := checkQuota(ctx, tx, caller, uid, q); err != nil {
				return err
			}
		}
		return fn(tx)
	})
}

// CheckQuota reports whether q would admit journey uid of caller (uuid.Nil:
// a new one) now, with a *QuotaError if not. It takes no lock: it refuses
// early, before a spawn does costly work; the admission that makes the
// journey live checks again, under the lock.
func (s *Store) CheckQuota(ctx context.Context, caller string, uid uuid.UUID, q Quota) error {
	if q == (Quota{}) {
		return nil
	}
	return checkQuota(ctx, s.pool, caller, uid, q)
}

func checkQuota(ctx context.Context, db querier, caller string, uid uuid.UUID, q Quota) error {
	var mine, all int
	var live bool
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE caller = $1), count(*), coalesce(bool_or(uid = $2), false)
		FROM journeys WHERE state IN ('starting', 'active')`, caller, uid).Scan(&mine, &all, &live); err != nil {
		return fmt.Errorf("counting live journeys: %w", err)
	}
	switch {
	case live:
		return nil
	case q.PerCaller > 0 && mine >= q.PerCaller:
		return &QuotaError{Caller: caller, Live: mine, Limit: q.PerCaller}
	case q.Total > 0 && all >= q.Total:
		return &QuotaError{Caller: caller, Total: true, Live: all, Limit: q.Total}
	}
	return nil
}
