package store

// Journeys: their rows, their lifecycle states and the statements that
// read and move them.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// Spawns counts the times the journey's worker was started again
	// (resume or fresh): a stop writes its state only if it is what the
	// stop read (StopIf).
	Spawns int64
}

const journeyColumns = `uid, caller, id, worker_id, definition_hash, state, isolation_level,
	coalesce(container_id, ''), coalesce(volume, ''), parent_journey, coalesce(agent_session_id, ''),
	action_count, cost_usd::float8, created_at, last_used_at, stopped_at,
	coalesce(base_commit, ''), coalesce(base_origin, ''), source, spawns`

func scanJourney(row pgx.Row) (Journey, error) {
	var j Journey
	err := row.Scan(&j.UID, &j.Caller, &j.ID, &j.WorkerID, &j.DefinitionHash, &j.State, &j.IsolationLevel,
		&j.ContainerID, &j.Workspace, &j.ParentJourney, &j.AgentSessionID,
		&j.ActionCount, &j.CostUSD, &j.CreatedAt, &j.LastUsedAt, &j.StoppedAt,
		&j.BaseCommit, &j.BaseOrigin, &j.Source, &j.Spawns)
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

// SetRunning records a started worker: state active, its container and
// workspace. It reports false, changing nothing, when the journey is no
// longer starting: a stop_worker that did not wait for the spawn (it read
// the journey before the spawn began) stopped or deleted it meanwhile, and
// the worker just made is not its to keep.
func (s *Store) SetRunning(ctx context.Context, uid uuid.UUID, containerID, workspace string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE journeys SET state = 'active', container_id = $2, volume = $3, stopped_at = NULL, last_used_at = now()
		WHERE uid = $1 AND state = 'starting'`, uid, containerID, workspace)
	if err != nil {
		return false, fmt.Errorf("recording the started worker: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// FailSpawn marks a journey whose spawn failed as failed, if it is still
// starting: a journey stopped or deleted meanwhile stays so.
func (s *Store) FailSpawn(ctx context.Context, uid uuid.UUID) error {
	if _, err := s.pool.Exec(ctx, `UPDATE journeys SET state = 'failed', stopped_at = now() WHERE uid = $1 AND state = 'starting'`, uid); err != nil {
		return fmt.Errorf("failing the spawn: %w", err)
	}
	return nil
}

// SetFailed marks a journey whose spawn failed as failed, if it is still
// starting (as FailSpawn), recording the worker and workspace it still
// has: a spawn that could not remove them leaves them named, so a later
// stop or fresh spawn removes them rather than reusing them.
func (s *Store) SetFailed(ctx context.Context, uid uuid.UUID, containerID, workspace string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE journeys SET state = 'failed', container_id = NULLIF($2, ''), volume = NULLIF($3, ''), stopped_at = now()
		WHERE uid = $1 AND state = 'starting'`, uid, containerID, workspace); err != nil {
		return fmt.Errorf("failing the spawn: %w", err)
	}
	return nil
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

// StopIf moves a journey to state (stopped or deleted) if it was not
// spawned again since it was read with spawns Spawns and no spawn is under
// way, and reports whether it did: stop_worker does not wait for an action
// (it ends it), so a spawn may have begun since it read the journey, and a
// worker that spawn made must not be left running under a stopped journey.
// A deleted journey stays deleted: a stop that kept its workspace, ending
// after another stop deleted it, finds it gone.
func (s *Store) StopIf(ctx context.Context, uid uuid.UUID, state JourneyState, spawns int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE journeys SET state = $2, stopped_at = now()
		WHERE uid = $1 AND state NOT IN ('starting', 'deleted') AND spawns = $3`, uid, string(state), spawns)
	if err != nil {
		return false, fmt.Errorf("stopping journey: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Orphan marks a live journey orphaned if its worker is still containerID
// and it was not spawned again since it was read (spawns), and reports
// whether it did; its egress grant goes with it. A journey stopped,
// deleted or given another worker since it was read (a stop_worker that
// raced the check, a spawn here or at another marketplace, which keeps the
// old worker's name until it records the new one) is left as it is.
func (s *Store) Orphan(ctx context.Context, uid uuid.UUID, containerID string, spawns int64) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE journeys SET state = 'orphaned', stopped_at = now(), egress_addr = NULL
		WHERE uid = $1 AND state IN ('starting', 'active') AND container_id IS NOT DISTINCT FROM NULLIF($2, '') AND spawns = $3`, uid, containerID, spawns)
	if err != nil {
		return false, fmt.Errorf("orphaning journey: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Reset starts caller's journey over (spawn mode fresh), if q admits it
// (a *QuotaError if not; a live journey is always admitted): new worker,
// counters, agent session and base cleared (until the new base is recorded,
// the journey has none, so nothing diffs against a base that is being
// replaced). Its audit rows stay, and so do its worker's and workspace's
// names until the new worker's replace them: the spawn removes the old
// ones after this, and a spawn that dies before it leaves them named for
// the next one to remove, not to reuse.
func (s *Store) Reset(ctx context.Context, caller string, uid uuid.UUID, workerID, definitionHash, isolation string, q Quota) error {
	return s.admit(ctx, caller, uid, q, func(tx pgx.Tx) error {
		return update(ctx, tx, `UPDATE journeys SET state = 'starting', spawns = spawns + 1, worker_id = $2, definition_hash = $3, isolation_level = $4,
			agent_session_id = NULL, action_count = 0, cost_usd = 0,
			base_commit = NULL, base_origin = NULL, source = NULL,
			created_at = now(), last_used_at = now(), stopped_at = NULL WHERE uid = $1 AND state <> 'deleted'`, uid, workerID, definitionHash, isolation)
	})
}

// Restart marks caller's stopped or orphaned journey as starting again
// (spawn mode resume), if q admits it (a *QuotaError if not), keeping its
// workspace, counters and agent session. A deleted journey is not brought
// back (ErrNotFound), nor by Reset.
func (s *Store) Restart(ctx context.Context, caller string, uid uuid.UUID, definitionHash string, q Quota) error {
	return s.admit(ctx, caller, uid, q, func(tx pgx.Tx) error {
		return update(ctx, tx, `UPDATE journeys SET state = 'starting', spawns = spawns + 1, definition_hash = $2, stopped_at = NULL WHERE uid = $1 AND state <> 'deleted'`, uid, definitionHash)
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

// StartingJourneys lists the journeys being spawned: their spawns under
// way, and those a marketplace died in the middle of.
func (s *Store) StartingJourneys(ctx context.Context) ([]uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, `SELECT uid FROM journeys WHERE state = 'starting'`)
	if err != nil {
		return nil, fmt.Errorf("listing starting journeys: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// IdleJourneys lists active journeys unused since before cutoff.
func (s *Store) IdleJourneys(ctx context.Context, cutoff time.Time) ([]Journey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+journeyColumns+` FROM journeys WHERE state = 'active' AND last_used_at < $1`, cutoff)
	if err != nil {
		return nil, fmt.Errorf("listing idle journeys: %w", err)
	}
	return collect(rows)
}
