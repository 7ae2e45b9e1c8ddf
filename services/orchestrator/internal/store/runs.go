package store

// The runs table: a run's row, its head and status.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// Run is one row of runs: the API's run (api.Run, what callers see) and
// what only the engine reads.
type Run struct {
	api.Run
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
	// LeaseOwner, when set, creates the run with its lease held by that
	// owner for LeaseTTL, with fencing token FirstFence: the creator works
	// its first node itself.
	LeaseOwner string
	LeaseTTL   time.Duration
}

// FirstFence is the fencing token of a run created with its lease
// (NewRun.LeaseOwner).
const FirstFence = 1

// InsertRun inserts a run with head_seq 0 and returns it.
func InsertRun(ctx context.Context, q Querier, n NewRun) (Run, error) {
	if traceID(n.Traceparent) == "" || len(n.Traceparent) > 128 {
		n.Traceparent, n.Tracestate = "", ""
	}
	if len(n.Tracestate) > maxTracestate {
		n.Tracestate = ""
	}
	// A lease taken here runs from the insert (clock_timestamp), not from
	// the transaction's start (now()): a fork that waited for its source's
	// lock keeps its whole TTL.
	return scanRun(q.QueryRow(ctx, `INSERT INTO runs (id, pipeline, pipeline_hash, thread, caller, status, error, forked_from_run, forked_from_seq, finished_at, traceparent, tracestate,
			lease_owner, lease_expires_at, fence)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), nullif($8, '')::uuid, $9, CASE WHEN $6 IN ('succeeded', 'failed', 'cancelled') THEN now() END,
			nullif($10, ''), nullif($11, ''),
			nullif($12, ''), CASE WHEN $12 <> '' THEN clock_timestamp() + $13 * interval '1 millisecond' END, CASE WHEN $12 <> '' THEN $14 ELSE 0 END)
		RETURNING `+runColumns,
		n.ID, n.Pipeline, n.PipelineHash, n.Thread, n.Caller, n.Status, n.Error, n.ForkedFromRun, n.ForkedFromSeq, n.Traceparent, n.Tracestate,
		n.LeaseOwner, n.LeaseTTL.Milliseconds(), FirstFence))
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
	// Limit bounds the result; 0 means api.DefaultListLimit, at most
	// api.MaxListLimit.
	Limit int
	// Before pages: only runs created before this run (by created_at, id).
	Before string
}

// ListRuns lists runs, newest first.
func ListRuns(ctx context.Context, q Querier, f ListFilter) ([]api.Run, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = api.DefaultListLimit
	}
	limit = min(limit, api.MaxListLimit)
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
	// As the API sends them: a list has no use for the trace context.
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (api.Run, error) {
		run, err := scanRun(r)
		return run.Run, err
	})
}

// RunUpdate is what a commit changes in a run's row.
type RunUpdate struct {
	HeadSeq      int
	Status       string
	Error        string
	PipelineHash string // set to migrate the run to a changed definition
	// Release gives up the committer's lease in the same statement.
	Release bool
	// InlineJob, when set, is the job of the node the committer goes on
	// with inline, written as the run's inline_job. When nil the run keeps
	// what it had, unless it ends (succeeded, failed, cancelled) or its
	// inline job is the node iteration the commit settles (WorkedNode,
	// WorkedIteration): that node's commit clears it, whether it was
	// worked inline or given its job since.
	InlineJob []byte
	// WorkedNode and WorkedIteration name the node iteration whose result
	// (or failed attempt) the update commits; empty for none.
	WorkedNode      string
	WorkedIteration int
}

// UpdateRun writes a run's new head, status and error.
func UpdateRun(ctx context.Context, q Execer, id string, u RunUpdate) error {
	_, err := q.Exec(ctx, `UPDATE runs SET head_seq = $2, status = $3, error = nullif($4, ''), updated_at = now(),
			pipeline_hash = coalesce(nullif($5, ''), pipeline_hash),
			finished_at = CASE WHEN $3 IN ('succeeded', 'failed', 'cancelled') THEN coalesce(finished_at, now()) END,
			lease_owner = CASE WHEN $6 THEN NULL ELSE lease_owner END,
			lease_expires_at = CASE WHEN $6 THEN NULL ELSE lease_expires_at END,
			inline_job = CASE WHEN $7::jsonb IS NOT NULL THEN $7::jsonb WHEN $3 IN ('succeeded', 'failed', 'cancelled') THEN NULL
				-- The job's args as the engine encodes them (nodeArgs).
				WHEN inline_job->>'node_id' = $8 AND inline_job->'iteration' = to_jsonb($9::int) THEN NULL
				ELSE inline_job END
		WHERE id = $1`, id, u.HeadSeq, u.Status, u.Error, u.PipelineHash, u.Release, u.InlineJob, u.WorkedNode, u.WorkedIteration)
	return err
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
