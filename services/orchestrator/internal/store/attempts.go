package store

// Node attempts: one row per attempt of a node iteration.

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/jackc/pgx/v5"
)

// Attempt is one attempt of a node: the API's type (package api), as the
// node_attempts rows hold it.
type Attempt = api.Attempt

// InsertAttempt records a finished attempt. The cost's parameter is cast:
// beside the 0 of nullif, Postgres would take it for an integer and store
// $0.73 as nothing and $3.90 as $3.
func InsertAttempt(ctx context.Context, q Execer, a Attempt) error {
	_, err := q.Exec(ctx, `INSERT INTO node_attempts (run_id, node_id, iteration, attempt, job_id, replica, status, error, session_id, cost_usd, task, journey, change_digest, started_at, heartbeat_at, finished_at)
		VALUES ($1, $2, $3, $4, nullif($5, 0), $6, $7, nullif($8, ''), nullif($9, ''), nullif($10::numeric, 0), nullif($11, ''), nullif($12, ''), nullif($13, ''), $14, now(), now())`,
		a.RunID, a.NodeID, a.Iteration, a.Attempt, a.JobID, a.Replica, a.Status, a.Error, a.SessionID, a.CostUSD, a.Task, a.Journey, a.ChangeDigest, a.StartedAt)
	return err
}

// ListAttempts lists a run's attempts in order.
func ListAttempts(ctx context.Context, q Querier, runID string) ([]Attempt, error) {
	return ListAttemptsAfter(ctx, q, runID, 0)
}

// ListAttemptsAfter lists a run's attempts with an id above after, in order.
func ListAttemptsAfter(ctx context.Context, q Querier, runID string, after int64) ([]Attempt, error) {
	rows, err := q.Query(ctx, `SELECT id, run_id::text, node_id, iteration, attempt, coalesce(job_id, 0), replica, status, coalesce(error, ''),
			coalesce(session_id, ''), coalesce(cost_usd, 0)::float8, coalesce(task, ''), coalesce(journey, ''), coalesce(change_digest, ''), started_at, finished_at
		FROM node_attempts WHERE run_id = $1 AND id > $2 ORDER BY id`, runID, after)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := r.Scan(&a.ID, &a.RunID, &a.NodeID, &a.Iteration, &a.Attempt, &a.JobID, &a.Replica, &a.Status, &a.Error, &a.SessionID, &a.CostUSD, &a.Task, &a.Journey, &a.ChangeDigest, &a.StartedAt, &a.FinishedAt)
		return a, err
	})
}

// RunCosts sums the cost of each run's attempts, for the runs given; a run
// without a costed attempt is left out.
func RunCosts(ctx context.Context, q Querier, runIDs []string) (map[string]float64, error) {
	rows, err := q.Query(ctx, `SELECT run_id::text, sum(cost_usd)::float8 FROM node_attempts
		WHERE run_id = ANY($1::uuid[]) AND cost_usd IS NOT NULL GROUP BY run_id`, runIDs)
	if err != nil {
		return nil, fmt.Errorf("summing the runs' costs: %w", err)
	}
	costs := map[string]float64{}
	for rows.Next() {
		var id string
		var cost float64
		if err := rows.Scan(&id, &cost); err != nil {
			rows.Close()
			return nil, err
		}
		costs[id] = cost
	}
	return costs, rows.Err()
}

// maxForkDepth bounds the forks NodeThread and NodeJourney walk back
// through.
const maxForkDepth = 100

// forkChain is run $1 and the runs it was forked from, back to $3 forks,
// each with its depth (0 for run $1): a node's result in a fork may come
// with the checkpoint it was forked from.
const forkChain = `WITH RECURSIVE chain AS (
		SELECT id, thread, forked_from_run, 0 AS depth FROM runs WHERE id = $1
		UNION ALL
		SELECT r.id, r.thread, r.forked_from_run, c.depth + 1
		FROM runs r JOIN chain c ON r.id = c.forked_from_run
		WHERE c.depth < $3
	)`

// NodeThread is the thread of the run whose attempt made node's result in
// run runID: runID's own, or, when the node's result came with a fork's
// checkpoint, that of the run it was forked from (and so on back), the
// nearest with a succeeded attempt of the node. A run's workers are its
// thread's: a node seeded from another's change finds that change's
// worker there. With no such attempt it is runID's thread.
func NodeThread(ctx context.Context, q Querier, runID, nodeID string) (string, error) {
	var thread string
	err := q.QueryRow(ctx, forkChain+`
		SELECT coalesce(
			(SELECT c.thread FROM chain c
			 WHERE EXISTS (SELECT 1 FROM node_attempts a WHERE a.run_id = c.id AND a.node_id = $2 AND a.status = 'succeeded')
			 ORDER BY c.depth LIMIT 1),
			(SELECT thread FROM runs WHERE id = $1))`, runID, nodeID, maxForkDepth).Scan(&thread)
	if err != nil {
		return "", fmt.Errorf("the thread of node %s of run %s: %w", nodeID, runID, err)
	}
	return thread, nil
}

// NodeJourney is the marketplace journey in which node's result of
// iteration in run runID was made, and the digest of the workspace it left
// there: those of the node's latest succeeded attempt of that iteration in
// the nearest run along runID's forks that has one (a fork's result may
// come with its checkpoint; the run it was forked from may have gone on to
// later iterations). Both are "" when that attempt recorded none (not a
// role via marketplace, or recorded before they were) or there is none.
func NodeJourney(ctx context.Context, q Querier, runID, nodeID string, iteration int) (journey, digest string, err error) {
	err = q.QueryRow(ctx, forkChain+`
		SELECT coalesce(a.journey, ''), coalesce(a.change_digest, '') FROM chain c
		JOIN node_attempts a ON a.run_id = c.id AND a.node_id = $2 AND a.iteration = $4 AND a.status = 'succeeded'
		ORDER BY c.depth, a.id DESC LIMIT 1`, runID, nodeID, maxForkDepth, iteration).Scan(&journey, &digest)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("the journey of node %s of run %s: %w", nodeID, runID, err)
	}
	return journey, digest, nil
}
