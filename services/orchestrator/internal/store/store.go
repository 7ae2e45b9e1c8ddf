// Package store reads and writes the orchestrator's tables in Postgres: runs
// with their lease and fencing token, checkpoints (deltas chained to a
// parent), node attempts, role sessions and interrupts. Every function takes
// the connection or transaction to run on ([Querier]), so that the engine
// composes them into one transaction with River's job inserts.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// Querier is what the store needs of a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is what the store's writes need: a Querier, or a [Batch] that
// queues them for one round trip.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Batch queues writes and sends them in one round trip ([Batch.Send]), in
// the order they were queued. Its Exec reports no rows affected: use it
// only for writes whose count does not matter.
type Batch struct{ b pgx.Batch }

// Exec queues a statement.
func (b *Batch) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	b.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

// Send runs the queued statements in tx. A second result for one node
// iteration fails with ErrDuplicateResult.
func (b *Batch) Send(ctx context.Context, tx pgx.Tx) error {
	if b.b.Len() == 0 {
		return nil
	}
	return duplicateResult(tx.SendBatch(ctx, &b.b).Close())
}

func duplicateResult(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "checkpoints_node_once_idx" {
		return ErrDuplicateResult
	}
	return err
}

// ErrNotFound is returned for a run, checkpoint or interrupt that does not
// exist.
var ErrNotFound = errors.New("not found")

// ErrStaleLease is returned when a commit presents a lease or fencing token
// that is no longer the run's: another replica took the run over.
var ErrStaleLease = errors.New("the run's lease is held by another replica (stale fencing token)")

// Run is one row of runs.
type Run struct {
	ID            string     `json:"id"`
	Pipeline      string     `json:"pipeline"`
	PipelineHash  string     `json:"pipeline_hash"`
	Thread        string     `json:"thread"`
	Caller        string     `json:"caller,omitempty"`
	Status        string     `json:"status"`
	Error         string     `json:"error,omitempty"`
	HeadSeq       int        `json:"head_seq"`
	ForkedFromRun string     `json:"forked_from_run,omitempty"`
	ForkedFromSeq *int       `json:"forked_from_seq,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	FinishedAt    *time.Time `json:"finished_at,omitempty"`
	// TraceID is the id of the run's trace (32 hex digits), which every
	// node attempt continues; empty when the run has none.
	TraceID string `json:"trace_id,omitempty"`
	// Traceparent and Tracestate are the W3C trace context the run was
	// created in; its nodes' spans are its children. Internal: callers
	// get TraceID.
	Traceparent string `json:"-"`
	Tracestate  string `json:"-"`
}

const runColumns = `id::text, pipeline, pipeline_hash, thread, caller, status, coalesce(error, ''), head_seq,
	coalesce(forked_from_run::text, ''), forked_from_seq, created_at, updated_at, finished_at,
	coalesce(traceparent, ''), coalesce(tracestate, ''), coalesce(split_part(traceparent, '-', 2), '')`

// runFields are the scan targets of runColumns, in order. TraceID is
// the traceparent's second field: InsertRun keeps only valid ones.
func runFields(r *Run) []any {
	return []any{
		&r.ID, &r.Pipeline, &r.PipelineHash, &r.Thread, &r.Caller, &r.Status, &r.Error, &r.HeadSeq,
		&r.ForkedFromRun, &r.ForkedFromSeq, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt, &r.Traceparent, &r.Tracestate, &r.TraceID,
	}
}

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	err := row.Scan(runFields(&r)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, ErrNotFound
	}
	return r, err
}

// traceID is the trace id of a W3C traceparent
// ("00-<trace id>-<span id>-<flags>"), or "" when it holds no valid one.
func traceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) < 4 {
		return ""
	}
	id, err := trace.TraceIDFromHex(parts[1])
	if err != nil || !id.IsValid() {
		return ""
	}
	return id.String()
}

// maxTracestate bounds the tracestate a run keeps. It comes from the
// caller (the request's headers or MCP _meta); the W3C specification lets a
// longer one be dropped, which loses only vendors' extra data.
const maxTracestate = 512

// NewRun is what InsertRun needs.
type NewRun struct {
	ID, Pipeline, PipelineHash, Thread, Caller, Status, Error string
	ForkedFromRun                                             string
	ForkedFromSeq                                             *int
	// Traceparent and Tracestate are the trace context the run's nodes
	// continue; empty for none.
	Traceparent, Tracestate string
}

// InsertRun inserts a run with head_seq 0 and returns it.
func InsertRun(ctx context.Context, q Querier, n NewRun) (Run, error) {
	if traceID(n.Traceparent) == "" || len(n.Traceparent) > 128 {
		n.Traceparent, n.Tracestate = "", ""
	}
	if len(n.Tracestate) > maxTracestate {
		n.Tracestate = ""
	}
	return scanRun(q.QueryRow(ctx, `INSERT INTO runs (id, pipeline, pipeline_hash, thread, caller, status, error, forked_from_run, forked_from_seq, finished_at, traceparent, tracestate)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), nullif($8, '')::uuid, $9, CASE WHEN $6 IN ('succeeded', 'failed', 'cancelled') THEN now() END,
			nullif($10, ''), nullif($11, ''))
		RETURNING `+runColumns,
		n.ID, n.Pipeline, n.PipelineHash, n.Thread, n.Caller, n.Status, n.Error, n.ForkedFromRun, n.ForkedFromSeq, n.Traceparent, n.Tracestate))
}

// GetRun reads a run.
func GetRun(ctx context.Context, q Querier, id string) (Run, error) {
	if !validUUID(id) {
		return Run{}, ErrNotFound
	}
	return scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1`, id))
}

// LockRun reads a run and locks its row until the transaction ends, which
// serialises every writer of the run.
func LockRun(ctx context.Context, tx pgx.Tx, id string) (Run, error) {
	if !validUUID(id) {
		return Run{}, ErrNotFound
	}
	return scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 FOR UPDATE`, id))
}

// ListFilter selects runs.
type ListFilter struct {
	// Pipeline, Status, Thread and Caller match exactly when set.
	Pipeline, Status, Thread, Caller string
	// Limit bounds the result; 0 means 50, at most 1000.
	Limit int
	// Before pages: only runs created before this run (by created_at, id).
	Before string
}

// ListRuns lists runs, newest first.
func ListRuns(ctx context.Context, q Querier, f ListFilter) ([]Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	limit = min(limit, 1000)
	if f.Before != "" && !validUUID(f.Before) {
		return nil, fmt.Errorf("%w: before %q is not a run id", ErrNotFound, f.Before)
	}
	rows, err := q.Query(ctx, `SELECT `+runColumns+` FROM runs
		WHERE ($1 = '' OR pipeline = $1) AND ($2 = '' OR status = $2) AND ($3 = '' OR thread = $3) AND ($4 = '' OR caller = $4)
		  AND ($5 = '' OR (created_at, id) < (SELECT created_at, id FROM runs WHERE id = nullif($5, '')::uuid))
		ORDER BY created_at DESC, id DESC LIMIT $6`, f.Pipeline, f.Status, f.Thread, f.Caller, f.Before, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Run, error) { return scanRun(r) })
}

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
// not. It also reads the role sessions of the run's thread, role → session:
// a commit that goes on with a successor knows its session without another
// statement.
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

// RunUpdate is what a commit changes in a run's row.
type RunUpdate struct {
	HeadSeq      int
	Status       string
	Error        string
	PipelineHash string // set to migrate the run to a changed definition
	// Release gives up the committer's lease in the same statement.
	Release bool
	// SetInline writes InlineJob, the job of the node the committer goes on
	// with inline (nil: none); without it the run keeps what it had.
	SetInline bool
	InlineJob []byte
}

// UpdateRun writes a run's new head, status and error.
func UpdateRun(ctx context.Context, q Execer, id string, u RunUpdate) error {
	_, err := q.Exec(ctx, `UPDATE runs SET head_seq = $2, status = $3, error = nullif($4, ''), updated_at = now(),
			pipeline_hash = coalesce(nullif($5, ''), pipeline_hash),
			finished_at = CASE WHEN $3 IN ('succeeded', 'failed', 'cancelled') THEN coalesce(finished_at, now()) END,
			lease_owner = CASE WHEN $6 THEN NULL ELSE lease_owner END,
			lease_expires_at = CASE WHEN $6 THEN NULL ELSE lease_expires_at END,
			inline_job = CASE WHEN $7 THEN $8::jsonb ELSE inline_job END
		WHERE id = $1`, id, u.HeadSeq, u.Status, u.Error, u.PipelineHash, u.Release, u.SetInline, u.InlineJob)
	return err
}

// Checkpoint is one row of checkpoints.
type Checkpoint struct {
	RunID     string         `json:"run_id"`
	Seq       int            `json:"seq"`
	ParentRun string         `json:"parent_run,omitempty"`
	ParentSeq *int           `json:"parent_seq,omitempty"`
	NodeID    string         `json:"node_id,omitempty"`
	Iteration int            `json:"iteration,omitempty"`
	Delta     runstate.State `json:"delta"`
	CreatedAt time.Time      `json:"created_at"`
	// Bytes is the stored size of the delta.
	Bytes int `json:"bytes"`
}

// InsertCheckpoint inserts a checkpoint. A second result for the same node
// and iteration of a run fails with ErrDuplicateResult.
func InsertCheckpoint(ctx context.Context, q Execer, c Checkpoint) error {
	delta, err := json.Marshal(c.Delta)
	if err != nil {
		return err
	}
	var parentRun any
	if c.ParentRun != "" {
		parentRun = c.ParentRun
	}
	var node, iteration any
	if c.NodeID != "" {
		node, iteration = c.NodeID, c.Iteration
	}
	_, err = q.Exec(ctx, `INSERT INTO checkpoints (run_id, seq, parent_run, parent_seq, node_id, iteration, delta) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		c.RunID, c.Seq, parentRun, c.ParentSeq, node, iteration, delta)
	return duplicateResult(err)
}

// ErrDuplicateResult is returned for a second result of one node iteration.
var ErrDuplicateResult = errors.New("this node's result for this iteration is already committed")

// ListCheckpoints lists a run's own checkpoints in order.
func ListCheckpoints(ctx context.Context, q Querier, runID string) ([]Checkpoint, error) {
	return ListCheckpointsAfter(ctx, q, runID, -1)
}

// ListCheckpointsAfter lists a run's own checkpoints after seq, in order.
func ListCheckpointsAfter(ctx context.Context, q Querier, runID string, after int) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT run_id::text, seq, coalesce(parent_run::text, ''), parent_seq, coalesce(node_id, ''), coalesce(iteration, 0), delta, created_at, pg_column_size(delta)
		FROM checkpoints WHERE run_id = $1 AND seq > $2 ORDER BY seq`, runID, after)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		var c Checkpoint
		var delta []byte
		err := r.Scan(&c.RunID, &c.Seq, &c.ParentRun, &c.ParentSeq, &c.NodeID, &c.Iteration, &delta, &c.CreatedAt, &c.Bytes)
		if err == nil {
			err = json.Unmarshal(delta, &c.Delta)
		}
		return c, err
	})
}

// LoadState folds the deltas of the chain that ends at checkpoint (runID,
// seq), following parents across forks.
func LoadState(ctx context.Context, q Querier, runID string, seq int) (runstate.State, error) {
	rows, err := q.Query(ctx, `WITH RECURSIVE chain AS (
			SELECT parent_run, parent_seq, delta, 0 AS depth FROM checkpoints WHERE run_id = $1 AND seq = $2
			UNION ALL
			SELECT c.parent_run, c.parent_seq, c.delta, chain.depth + 1
			FROM checkpoints c JOIN chain ON c.run_id = chain.parent_run AND c.seq = chain.parent_seq
		) SELECT delta FROM chain ORDER BY depth DESC`, runID, seq)
	if err != nil {
		return runstate.State{}, err
	}
	var st runstate.State
	n := 0
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&raw}, func() error {
		n++
		var d runstate.State
		if err := json.Unmarshal(raw, &d); err != nil {
			return fmt.Errorf("decoding a checkpoint: %w", err)
		}
		st.Apply(d)
		return nil
	})
	if err != nil {
		return runstate.State{}, err
	}
	if n == 0 {
		return runstate.State{}, fmt.Errorf("checkpoint %d of run %s: %w", seq, runID, ErrNotFound)
	}
	return st, nil
}

// Attempt is one attempt of a node: the API's type (package api), as the
// node_attempts rows hold it.
type Attempt = api.Attempt

// InsertAttempt records a finished attempt.
func InsertAttempt(ctx context.Context, q Execer, a Attempt) error {
	_, err := q.Exec(ctx, `INSERT INTO node_attempts (run_id, node_id, iteration, attempt, job_id, replica, status, error, session_id, cost_usd, started_at, heartbeat_at, finished_at)
		VALUES ($1, $2, $3, $4, nullif($5, 0), $6, $7, nullif($8, ''), nullif($9, ''), nullif($10, 0), $11, now(), now())`,
		a.RunID, a.NodeID, a.Iteration, a.Attempt, a.JobID, a.Replica, a.Status, a.Error, a.SessionID, a.CostUSD, a.StartedAt)
	return err
}

// ListAttempts lists a run's attempts in order.
func ListAttempts(ctx context.Context, q Querier, runID string) ([]Attempt, error) {
	return ListAttemptsAfter(ctx, q, runID, 0)
}

// ListAttemptsAfter lists a run's attempts with an id above after, in order.
func ListAttemptsAfter(ctx context.Context, q Querier, runID string, after int64) ([]Attempt, error) {
	rows, err := q.Query(ctx, `SELECT id, run_id::text, node_id, iteration, attempt, coalesce(job_id, 0), replica, status, coalesce(error, ''),
			coalesce(session_id, ''), coalesce(cost_usd, 0)::float8, started_at, finished_at
		FROM node_attempts WHERE run_id = $1 AND id > $2 ORDER BY id`, runID, after)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := r.Scan(&a.ID, &a.RunID, &a.NodeID, &a.Iteration, &a.Attempt, &a.JobID, &a.Replica, &a.Status, &a.Error, &a.SessionID, &a.CostUSD, &a.StartedAt, &a.FinishedAt)
		return a, err
	})
}

// ThreadUsedByOthers reports whether a run of another caller than caller
// is on thread: its role sessions are that caller's.
func ThreadUsedByOthers(ctx context.Context, q Querier, thread, caller string) (bool, error) {
	var used bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE thread = $1 AND caller <> $2)`, thread, caller).Scan(&used)
	return used, err
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

// Interrupt is an approval node waiting for, or given, its decision: the
// API's type (package api), as the interrupts rows hold it.
type Interrupt = api.Interrupt

const interruptColumns = `id::text, run_id::text, node_id, iteration, status, value, coalesce(decided_by, ''), created_at, resumed_at`

func scanInterrupt(row pgx.Row) (Interrupt, error) {
	var i Interrupt
	var value []byte
	err := row.Scan(&i.ID, &i.RunID, &i.NodeID, &i.Iteration, &i.Status, &value, &i.DecidedBy, &i.CreatedAt, &i.ResumedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Interrupt{}, ErrNotFound
	}
	i.Value = value
	return i, err
}

// InsertInterrupt opens an interrupt for an approval node's iteration.
func InsertInterrupt(ctx context.Context, q Execer, runID, nodeID string, iteration int) error {
	// A cancelled interrupt (its run failed) opens again when the run is
	// resumed.
	_, err := q.Exec(ctx, `INSERT INTO interrupts (run_id, node_id, iteration, status) VALUES ($1, $2, $3, 'pending')
		ON CONFLICT (run_id, node_id, iteration) DO UPDATE SET status = 'pending', value = NULL, decided_by = NULL, resumed_at = NULL, created_at = now()
		WHERE interrupts.status = 'cancelled'`, runID, nodeID, iteration)
	return err
}

// InterruptRun returns the run of an interrupt, without locking anything:
// writers lock the run first, then the interrupt.
func InterruptRun(ctx context.Context, q Querier, id string) (string, error) {
	if !validUUID(id) {
		return "", ErrNotFound
	}
	var run string
	err := q.QueryRow(ctx, `SELECT run_id::text FROM interrupts WHERE id = $1`, id).Scan(&run)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return run, err
}

// ShareLockRun locks a run's row against writers until the transaction ends
// (a fork reading its checkpoints while a prune could delete them).
func ShareLockRun(ctx context.Context, tx pgx.Tx, id string) error {
	if !validUUID(id) {
		return ErrNotFound
	}
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR SHARE`, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// LockInterrupt reads an interrupt and locks it.
func LockInterrupt(ctx context.Context, tx pgx.Tx, id string) (Interrupt, error) {
	if !validUUID(id) {
		return Interrupt{}, ErrNotFound
	}
	return scanInterrupt(tx.QueryRow(ctx, `SELECT `+interruptColumns+` FROM interrupts WHERE id = $1 FOR UPDATE`, id))
}

// ResolveInterrupt records an interrupt's decision.
func ResolveInterrupt(ctx context.Context, q Execer, id, status string, value json.RawMessage, by string) error {
	_, err := q.Exec(ctx, `UPDATE interrupts SET status = $2, value = $3, decided_by = nullif($4, ''), resumed_at = now() WHERE id = $1`, id, status, []byte(value), by)
	return err
}

// CancelInterrupts cancels a run's pending interrupts.
func CancelInterrupts(ctx context.Context, q Execer, runID string) error {
	_, err := q.Exec(ctx, `UPDATE interrupts SET status = 'cancelled', resumed_at = now() WHERE run_id = $1 AND status = 'pending'`, runID)
	return err
}

// ListInterrupts lists a run's interrupts in order.
func ListInterrupts(ctx context.Context, q Querier, runID string) ([]Interrupt, error) {
	rows, err := q.Query(ctx, `SELECT `+interruptColumns+` FROM interrupts WHERE run_id = $1 ORDER BY created_at, id`, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Interrupt, error) { return scanInterrupt(r) })
}

// PendingInterrupts lists up to limit pending interrupts of waiting runs,
// of every caller, oldest first: the candidates of an approvals inbox.
func PendingInterrupts(ctx context.Context, q Querier, limit int) ([]Interrupt, error) {
	rows, err := q.Query(ctx, `SELECT `+interruptColumns+` FROM interrupts
		WHERE status = 'pending' AND run_id IN (SELECT id FROM runs WHERE status = 'waiting')
		ORDER BY created_at, id LIMIT $1`, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Interrupt, error) { return scanInterrupt(r) })
}

// ForkChildren lists the first checkpoints of forks that start from a
// checkpoint of runID before seq.
func ForkChildren(ctx context.Context, q Querier, runID string, before int) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT run_id::text, seq, parent_seq FROM checkpoints WHERE parent_run = $1 AND parent_seq < $2 AND parent_run <> run_id`, runID, before)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		var c Checkpoint
		err := r.Scan(&c.RunID, &c.Seq, &c.ParentSeq)
		c.ParentRun = runID
		return c, err
	})
}

// ReplaceWithSnapshot turns a checkpoint into a full snapshot with no
// parent, so the checkpoints before it can be deleted.
func ReplaceWithSnapshot(ctx context.Context, q Querier, runID string, seq int, st runstate.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `UPDATE checkpoints SET delta = $3, parent_run = NULL, parent_seq = NULL WHERE run_id = $1 AND seq = $2`, runID, seq, b)
	return err
}

// DeleteCheckpointsBefore deletes a run's checkpoints before seq and returns
// how many.
func DeleteCheckpointsBefore(ctx context.Context, q Querier, runID string, seq int) (int64, error) {
	tag, err := q.Exec(ctx, `DELETE FROM checkpoints WHERE run_id = $1 AND seq < $2`, runID, seq)
	return tag.RowsAffected(), err
}

// CheckpointBytes is the stored size of checkpoints: their number and the
// bytes of their rows (pg_column_size of the whole row).
func CheckpointBytes(ctx context.Context, q Querier) (count, bytes int64, err error) {
	err = q.QueryRow(ctx, `SELECT count(*), coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c`).Scan(&count, &bytes)
	return count, bytes, err
}

func validUUID(s string) bool {
	// Postgres would refuse a malformed uuid with an error that aborts the
	// transaction; such an id names nothing.
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// RunCount is how many runs of a pipeline have a status.
type RunCount struct {
	Pipeline, Status string
	Runs             int64
}

// CountRuns counts runs by pipeline and status.
func CountRuns(ctx context.Context, q Querier) ([]RunCount, error) {
	rows, err := q.Query(ctx, `SELECT pipeline, status, count(*) FROM runs GROUP BY pipeline, status ORDER BY pipeline, status`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[RunCount])
}

// CheckpointCreatedAt returns when a checkpoint was committed.
func CheckpointCreatedAt(ctx context.Context, q Querier, runID string, seq int) (time.Time, error) {
	var at time.Time
	err := q.QueryRow(ctx, `SELECT created_at FROM checkpoints WHERE run_id = $1 AND seq = $2`, runID, seq).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return at, ErrNotFound
	}
	return at, err
}
