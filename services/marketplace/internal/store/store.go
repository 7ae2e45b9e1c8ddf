// Package store keeps the marketplace's state in Postgres: journeys, the
// audit log of actions, and callers' token hashes. A restart of the
// marketplace loses nothing because nothing lives only in memory.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Sentinel errors for callers to branch on.
var (
	// ErrNotFound: no such journey for this caller (another caller's journey
	// is not found either).
	ErrNotFound = errors.New("not found")
	// ErrExists: the caller already has a journey with that id.
	ErrExists = errors.New("already exists")
)

// JourneyState is a journey's lifecycle state.
type JourneyState string

// The journey states.
const (
	StateStarting JourneyState = "starting"
	StateActive   JourneyState = "active"
	StateStopped  JourneyState = "stopped"
	StateOrphaned JourneyState = "orphaned" // its container vanished or died
	StateFailed   JourneyState = "failed"
	StateDeleted  JourneyState = "deleted"
)

// Live reports whether a journey in this state should have a running worker.
func (s JourneyState) Live() bool { return s == StateStarting || s == StateActive }

// Journey is one worker instance with its workspace.
type Journey struct {
	UID            uuid.UUID
	Caller         string
	ID             string
	WorkerID       string
	DefinitionHash string
	State          JourneyState
	IsolationLevel string
	ContainerID    string
	Workspace      string
	ParentJourney  *uuid.UUID
	AgentSessionID string
	ActionCount    int64
	CostUSD        float64
	CreatedAt      time.Time
	LastUsedAt     time.Time
	StoppedAt      *time.Time
	// BaseCommit is the commit of the journey's base in the marketplace's
	// base store, "" for a journey from before sources existed; BaseOrigin
	// the git source's commit it descends from ("" for none); Source what
	// the source was, as JSON (nil for none).
	BaseCommit string
	BaseOrigin string
	Source     []byte
}

// Store is the marketplace's Postgres state.
type Store struct {
	pool *pgxpool.Pool

	// locks holds the journey locks (locks.go), made on first use.
	locksOnce sync.Once
	locks     *pgxpool.Pool
	locksErr  error
}

// New returns a store on pool. The schema comes from the migrations module.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Ping checks the database is reachable.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

const journeyColumns = `uid, caller, id, worker_id, definition_hash, state, isolation_level,
	coalesce(container_id, ''), coalesce(volume, ''), parent_journey, coalesce(agent_session_id, ''),
	action_count, cost_usd::float8, created_at, last_used_at, stopped_at,
	coalesce(base_commit, ''), coalesce(base_origin, ''), source`

func scanJourney(row pgx.Row) (Journey, error) {
	var j Journey
	err := row.Scan(&j.UID, &j.Caller, &j.ID, &j.WorkerID, &j.DefinitionHash, &j.State, &j.IsolationLevel,
		&j.ContainerID, &j.Workspace, &j.ParentJourney, &j.AgentSessionID,
		&j.ActionCount, &j.CostUSD, &j.CreatedAt, &j.LastUsedAt, &j.StoppedAt,
		&j.BaseCommit, &j.BaseOrigin, &j.Source)
	if errors.Is(err, pgx.ErrNoRows) {
		return j, ErrNotFound
	}
	return j, err
}

// ErrParentNotLive refuses a nested journey whose parent is no longer live.
var ErrParentNotLive = errors.New("the journey whose agent spawns this one is not live")

// CreateJourney inserts a journey in state starting, if q admits one more
// live journey of j.Caller (a *QuotaError if not). It fails with ErrExists
// when the caller already has a journey with that id, and with
// ErrParentNotLive for a nested journey whose parent is not live. j.UID,
// when set, is the new journey's uid (the caller may hold its lock
// already); else one is drawn.
func (s *Store) CreateJourney(ctx context.Context, j Journey, q Quota) (Journey, error) {
	if j.UID == uuid.Nil {
		j.UID = uuid.New()
	}
	var out Journey
	err := s.admit(ctx, j.Caller, uuid.Nil, q, func(tx pgx.Tx) (err error) {
		out, err = insertJourney(ctx, tx, j)
		return err
	})
	if err != nil {
		return Journey{}, err
	}
	return out, nil
}

// insertJourney inserts j in state starting, with the worker, workspace
// and base it may have already (a claimed pool member's), checking a
// nested journey's parent.
func insertJourney(ctx context.Context, tx pgx.Tx, j Journey) (Journey, error) {
	if j.ParentJourney != nil {
		// A nested journey needs a live parent; the row lock orders
		// this against the parent's stop, which changes its state
		// before it stops the nested journeys it finds.
		var state string
		if err := tx.QueryRow(ctx, `SELECT state FROM journeys WHERE uid = $1 FOR SHARE`, *j.ParentJourney).Scan(&state); err != nil {
			return Journey{}, fmt.Errorf("reading the parent journey: %w", err)
		}
		if !JourneyState(state).Live() {
			return Journey{}, ErrParentNotLive
		}
	}
	row := tx.QueryRow(ctx, `INSERT INTO journeys (uid, caller, id, worker_id, definition_hash, state, isolation_level, parent_journey, container_id, volume, base_commit)
		VALUES ($7, $1, $2, $3, $4, 'starting', $5, $6, nullif($8, ''), nullif($9, ''), nullif($10, '')) RETURNING `+journeyColumns,
		j.Caller, j.ID, j.WorkerID, j.DefinitionHash, j.IsolationLevel, j.ParentJourney, j.UID, j.ContainerID, j.Workspace, j.BaseCommit)
	out, err := scanJourney(row)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Journey{}, fmt.Errorf("journey %q: %w", j.ID, ErrExists)
	}
	if err != nil {
		return Journey{}, fmt.Errorf("creating journey: %w", err)
	}
	return out, nil
}

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

// querier is a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Journey returns the caller's journey with the given id.
func (s *Store) Journey(ctx context.Context, caller, id string) (Journey, error) {
	j, err := scanJourney(s.pool.QueryRow(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE caller = $1 AND id = $2 AND state <> 'deleted'`, caller, id))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return j, fmt.Errorf("reading journey: %w", err)
	}
	return j, err
}

// NestedJourneys returns the journeys spawned by the agent of journey
// parent (its nested journeys), deleted ones left out.
func (s *Store) NestedJourneys(ctx context.Context, parent uuid.UUID) ([]Journey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE parent_journey = $1 AND state <> 'deleted' ORDER BY created_at`, parent)
	if err != nil {
		return nil, fmt.Errorf("listing nested journeys: %w", err)
	}
	return collect(rows)
}

// JourneyByUID returns a journey by its internal id, whoever its caller.
func (s *Store) JourneyByUID(ctx context.Context, uid uuid.UUID) (Journey, error) {
	j, err := scanJourney(s.pool.QueryRow(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE uid = $1`, uid))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return j, fmt.Errorf("reading journey: %w", err)
	}
	return j, err
}

// Journeys lists the caller's journeys, newest first, optionally in one state.
func (s *Store) Journeys(ctx context.Context, caller string, state JourneyState, page Page) ([]Journey, error) {
	limit := page.Limit
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.pool.Query(ctx, `SELECT `+journeyColumns+` FROM journeys
		WHERE caller = $1 AND state <> 'deleted' AND ($2 = '' OR state = $2)
		AND ($3::timestamptz IS NULL OR created_at < $3 OR (created_at = $3 AND id > $4))
		ORDER BY created_at DESC, id LIMIT nullif($5, -1)`, caller, string(state), page.AfterCreated, page.AfterID, limit)
	if err != nil {
		return nil, fmt.Errorf("listing journeys: %w", err)
	}
	return collect(rows)
}

// Page is one page of a listing, newest first: at most Limit journeys (0:
// all) after the journey created at AfterCreated with id AfterID (nil:
// from the newest).
type Page struct {
	AfterCreated *time.Time
	AfterID      string
	Limit        int
}

// LiveJourneys lists every journey that should have a running worker.
func (s *Store) LiveJourneys(ctx context.Context) ([]Journey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE state IN ('starting', 'active') ORDER BY created_at`)
	if err != nil {
		return nil, fmt.Errorf("listing live journeys: %w", err)
	}
	return collect(rows)
}

// LiveCounts counts the live journeys (starting or active) by worker id.
func (s *Store) LiveCounts(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT worker_id, count(*) FROM journeys WHERE state IN ('starting', 'active') GROUP BY worker_id`)
	if err != nil {
		return nil, fmt.Errorf("counting live journeys: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var worker string
		var n int64
		if err := rows.Scan(&worker, &n); err != nil {
			return nil, err
		}
		out[worker] = n
	}
	return out, rows.Err()
}

// KnownJourneys lists every journey that still owns a workspace (not deleted).
func (s *Store) KnownJourneys(ctx context.Context) (map[uuid.UUID]Journey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE state <> 'deleted'`)
	if err != nil {
		return nil, fmt.Errorf("listing journeys: %w", err)
	}
	js, err := collect(rows)
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID]Journey, len(js))
	for _, j := range js {
		out[j.UID] = j
	}
	return out, nil
}

func collect(rows pgx.Rows) ([]Journey, error) {
	defer rows.Close()
	var out []Journey
	for rows.Next() {
		j, err := scanJourney(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// SetRunning records a started worker: state active, its container and workspace.
func (s *Store) SetRunning(ctx context.Context, uid uuid.UUID, containerID, workspace string) error {
	return s.exec(ctx, `UPDATE journeys SET state = 'active', container_id = $2, volume = $3, stopped_at = NULL, last_used_at = now() WHERE uid = $1`,
		uid, containerID, workspace)
}

// SetFailed marks a journey failed, recording the worker and workspace it
// still has: a spawn that could not remove them leaves them named, so a
// later stop or fresh spawn removes them rather than reusing them.
func (s *Store) SetFailed(ctx context.Context, uid uuid.UUID, containerID, workspace string) error {
	return s.exec(ctx, `UPDATE journeys SET state = 'failed', container_id = NULLIF($2, ''), volume = NULLIF($3, ''), stopped_at = now() WHERE uid = $1`,
		uid, containerID, workspace)
}

// DeletedJourneys returns those of uids that are deleted journeys.
func (s *Store) DeletedJourneys(ctx context.Context, uids []uuid.UUID) ([]uuid.UUID, error) {
	if len(uids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT uid FROM journeys WHERE uid = ANY($1) AND state = 'deleted'`, uids)
	if err != nil {
		return nil, fmt.Errorf("listing deleted journeys: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// SetBase records a journey's base: its commit, the git commit it descends
// from ("" for none) and the source as JSON (nil for none).
func (s *Store) SetBase(ctx context.Context, uid uuid.UUID, commit, origin string, source []byte) error {
	return s.exec(ctx, `UPDATE journeys SET base_commit = $2, base_origin = nullif($3, ''), source = $4 WHERE uid = $1`,
		uid, commit, origin, source)
}

// SetState moves a journey to a state; stopped, orphaned, failed and deleted
// also record when.
func (s *Store) SetState(ctx context.Context, uid uuid.UUID, state JourneyState) error {
	return s.exec(ctx, `UPDATE journeys SET state = $2,
		stopped_at = CASE WHEN $2 IN ('stopped', 'orphaned', 'failed', 'deleted') THEN now() ELSE NULL END WHERE uid = $1`, uid, string(state))
}

// Reset starts caller's journey over (spawn mode fresh), if q admits it
// (a *QuotaError if not; a live journey is always admitted): new worker,
// counters, agent session and base cleared (until the new base is recorded,
// the journey has none, so nothing diffs against a base that is being
// replaced). Its audit rows stay.
func (s *Store) Reset(ctx context.Context, caller string, uid uuid.UUID, workerID, definitionHash, isolation string, q Quota) error {
	return s.admit(ctx, caller, uid, q, func(tx pgx.Tx) error {
		return update(ctx, tx, `UPDATE journeys SET state = 'starting', worker_id = $2, definition_hash = $3, isolation_level = $4,
			container_id = NULL, volume = NULL, agent_session_id = NULL, action_count = 0, cost_usd = 0,
			base_commit = NULL, base_origin = NULL, source = NULL,
			created_at = now(), last_used_at = now(), stopped_at = NULL WHERE uid = $1`, uid, workerID, definitionHash, isolation)
	})
}

// Restart marks caller's stopped or orphaned journey as starting again
// (spawn mode resume), if q admits it (a *QuotaError if not), keeping its
// workspace, counters and agent session.
func (s *Store) Restart(ctx context.Context, caller string, uid uuid.UUID, definitionHash string, q Quota) error {
	return s.admit(ctx, caller, uid, q, func(tx pgx.Tx) error {
		return update(ctx, tx, `UPDATE journeys SET state = 'starting', definition_hash = $2, stopped_at = NULL WHERE uid = $1`, uid, definitionHash)
	})
}

// TouchJourney returns a journey by its internal id, marked used now: an
// action reads its journey so under the journey's lock, in one round trip,
// and its idle timer starts over as it begins (the audit row's update
// marks it again as it ends).
func (s *Store) TouchJourney(ctx context.Context, uid uuid.UUID) (Journey, error) {
	j, err := scanJourney(s.pool.QueryRow(ctx, `UPDATE journeys SET last_used_at = now() WHERE uid = $1 RETURNING `+journeyColumns, uid))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return j, fmt.Errorf("reading journey: %w", err)
	}
	return j, err
}

// SetAgentSession records the agent session id an agent worker reported.
func (s *Store) SetAgentSession(ctx context.Context, uid uuid.UUID, sessionID string) error {
	return s.exec(ctx, `UPDATE journeys SET agent_session_id = $2 WHERE uid = $1`, uid, sessionID)
}

// IdleJourneys lists active journeys unused since before cutoff.
func (s *Store) IdleJourneys(ctx context.Context, cutoff time.Time) ([]Journey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE state = 'active' AND last_used_at < $1`, cutoff)
	if err != nil {
		return nil, fmt.Errorf("listing idle journeys: %w", err)
	}
	return collect(rows)
}

func (s *Store) exec(ctx context.Context, sql string, args ...any) error {
	return update(ctx, s.pool, sql, args...)
}

// update runs an UPDATE of one journey: ErrNotFound if there is none.
func update(ctx context.Context, db querier, sql string, args ...any) error {
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("updating journey: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Decision is what became of an action.
type Decision string

// The decisions.
const (
	DecisionAllowed Decision = "allowed" // the gate allowed it and it ran
	DecisionRefused Decision = "refused" // malformed, or the gate refused it; the worker saw nothing
	DecisionFailed  Decision = "failed"  // allowed, but running it failed
)

// ActionRecord is one row of the audit log.
type ActionRecord struct {
	JourneyUID     uuid.UUID
	Caller         string
	WorkerID       string
	DefinitionHash string
	ActionType     string
	Target         string
	Decision       Decision
	Violations     []meshtype.Violation
	Error          string
	Duration       time.Duration
	RequestBytes   int64
	ResponseBytes  int64
	CostUSD        float64
	TraceID        string
	// Uncounted keeps an allowed record out of the journey's action count:
	// results taken out (diffs, exports) are audited like actions but are
	// not actions the worker ran.
	Uncounted bool
	// ToolCalls are an agent's own tool calls during the action, as the
	// gate inside the worker decided them: each becomes a row of its own
	// (ActionTypeAgentTool), written with the action's, under it.
	ToolCalls []meshtype.ToolDecision
	// ParentID is, on a row read back, the action a tool call row belongs
	// to (0 for actions).
	ParentID int64
}

// ActionTypeAgentTool is the action_type of an agent tool call's row.
const ActionTypeAgentTool = "agent_tool"

// RecordAction writes an audit row. An allowed action also counts against
// the journey (actions, cost, last use) in the same transaction, so the
// counters the gate reads always match the audit log.
func (s *Store) RecordAction(ctx context.Context, r ActionRecord) error {
	violations, err := json.Marshal(nonNil(r.Violations))
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO actions (journey_uid, caller, worker_id, definition_hash, action_type, target,
			decision, violations, error, duration_us, request_bytes, response_bytes, cost_usd, trace_id)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, $8, nullif($9, ''), $10, $11, $12, $13, nullif($14, '')) RETURNING id`,
			r.JourneyUID, r.Caller, r.WorkerID, r.DefinitionHash, r.ActionType, r.Target, string(r.Decision), violations,
			r.Error, r.Duration.Microseconds(), r.RequestBytes, r.ResponseBytes, r.CostUSD, r.TraceID).Scan(&id); err != nil {
			return fmt.Errorf("recording action: %w", err)
		}
		for _, c := range r.ToolCalls {
			decision := DecisionAllowed
			if !c.Allowed {
				decision = DecisionRefused
			}
			vs, err := json.Marshal(nonNil(c.Violations))
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO actions (journey_uid, caller, worker_id, definition_hash, action_type, target,
				decision, violations, trace_id, parent_action_id)
				VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, $8, nullif($9, ''), $10)`,
				r.JourneyUID, r.Caller, r.WorkerID, r.DefinitionHash, ActionTypeAgentTool, c.Tool+": "+c.Summary, string(decision), vs,
				r.TraceID, id); err != nil {
				return fmt.Errorf("recording an agent tool call: %w", err)
			}
		}
		counted := 0
		if r.Decision == DecisionAllowed && !r.Uncounted {
			counted = 1
		}
		if _, err := tx.Exec(ctx, `UPDATE journeys SET action_count = action_count + $2, cost_usd = cost_usd + $3, last_used_at = now() WHERE uid = $1`,
			r.JourneyUID, counted, r.CostUSD); err != nil {
			return fmt.Errorf("counting action: %w", err)
		}
		return nil
	})
}

func nonNil(v []meshtype.Violation) []meshtype.Violation {
	if v == nil {
		return []meshtype.Violation{}
	}
	return v
}

// ActionCounts is how many of a journey's actions ended each way.
type ActionCounts struct {
	Allowed, Refused, Failed int64
}

// ActionCounts counts a journey's audit rows by decision.
func (s *Store) ActionCounts(ctx context.Context, uid uuid.UUID) (ActionCounts, error) {
	var c ActionCounts
	err := s.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE decision = 'allowed'), count(*) FILTER (WHERE decision = 'refused'), count(*) FILTER (WHERE decision = 'failed')
		FROM actions WHERE journey_uid = $1`, uid).Scan(&c.Allowed, &c.Refused, &c.Failed)
	if err != nil {
		return c, fmt.Errorf("counting actions: %w", err)
	}
	return c, nil
}

// AuditRow is an audit record as read back.
type AuditRow struct {
	ActionRecord
	ID        int64
	CreatedAt time.Time
}

// Actions returns a journey's audit rows, oldest first.
func (s *Store) Actions(ctx context.Context, uid uuid.UUID) ([]AuditRow, error) {
	return s.actions(ctx, `WHERE journey_uid = $1 ORDER BY id`, uid)
}

// RecentActions returns a page of a journey's audit rows, newest first:
// at most limit rows, of ids below before when before is not 0.
func (s *Store) RecentActions(ctx context.Context, uid uuid.UUID, before int64, limit int) ([]AuditRow, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	return s.actions(ctx, `WHERE journey_uid = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, uid, before, limit)
}

func (s *Store) actions(ctx context.Context, where string, args ...any) ([]AuditRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, journey_uid, caller, worker_id, definition_hash, action_type, coalesce(target, ''),
		decision, violations, coalesce(error, ''), duration_us, request_bytes, response_bytes, coalesce(cost_usd, 0)::float8, coalesce(trace_id, ''), created_at,
		coalesce(parent_action_id, 0)
		FROM actions `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("reading actions: %w", err)
	}
	defer rows.Close()
	var out []AuditRow
	for rows.Next() {
		var a AuditRow
		var us int64
		var violations []byte
		if err := rows.Scan(&a.ID, &a.JourneyUID, &a.Caller, &a.WorkerID, &a.DefinitionHash, &a.ActionType, &a.Target,
			&a.Decision, &violations, &a.Error, &us, &a.RequestBytes, &a.ResponseBytes, &a.CostUSD, &a.TraceID, &a.CreatedAt, &a.ParentID); err != nil {
			return nil, err
		}
		a.Duration = time.Duration(us) * time.Microsecond
		if err := json.Unmarshal(violations, &a.Violations); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// PutToken records that a token (by its hash) authenticates as caller. A
// token already known keeps working; re-putting it for another caller moves it.
func (s *Store) PutToken(ctx context.Context, caller string, hash []byte, parent *uuid.UUID) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO api_tokens (caller, token_sha256, parent_journey) VALUES ($1, $2, $3)
		ON CONFLICT (token_sha256) DO UPDATE SET caller = excluded.caller, parent_journey = excluded.parent_journey, revoked_at = NULL`,
		caller, hash, parent)
	if err != nil {
		return fmt.Errorf("storing token: %w", err)
	}
	return nil
}

// Caller returns the caller a token hash authenticates as, or ErrNotFound.
func (s *Store) Caller(ctx context.Context, hash []byte) (string, error) {
	var caller string
	err := s.pool.QueryRow(ctx, `SELECT caller FROM api_tokens WHERE token_sha256 = $1 AND revoked_at IS NULL`, hash).Scan(&caller)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("looking up token: %w", err)
	}
	return caller, nil
}

// RevokeNested revokes the tokens minted for an agent journey's nested calls.
func (s *Store) RevokeNested(ctx context.Context, journey uuid.UUID) error {
	if _, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now() WHERE parent_journey = $1 AND revoked_at IS NULL`, journey); err != nil {
		return fmt.Errorf("revoking nested tokens: %w", err)
	}
	return nil
}

// RevokeConfiguredExcept revokes the operator-configured tokens (those not
// minted for a journey) whose hashes are not in keep: a token removed from
// the configuration stops working at the next start.
func (s *Store) RevokeConfiguredExcept(ctx context.Context, keep [][]byte) error {
	if _, err := s.pool.Exec(ctx, `UPDATE api_tokens SET revoked_at = now()
		WHERE parent_journey IS NULL AND revoked_at IS NULL AND NOT (token_sha256 = ANY($1))`, keep); err != nil {
		return fmt.Errorf("revoking old tokens: %w", err)
	}
	return nil
}
