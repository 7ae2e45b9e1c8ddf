package store

import (
	"context"
	"encoding/json"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/jackc/pgx/v5"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtext"
	"github.com/meshwork/meshwork/pkg/textcut"
)

// AgentEvent is a stored event of a node's agent: the API's type (package
// api).
type AgentEvent = api.AgentEvent

// Bounds on what one event may store: the texts are the agent's output.
const (
	maxAgentEventText = 2000
	maxViolations     = 50
)

// AddAgentEvent records an event of a node's agent.
func AddAgentEvent(ctx context.Context, q Execer, runID, nodeID string, ev meshtype.AgentEvent) error {
	var allowed *bool
	var violations []byte
	if d := ev.Decision; d != nil {
		allowed = &d.Allowed
		vs := d.Violations[:min(len(d.Violations), maxViolations)]
		for i := range vs {
			vs[i].Message = clip(vs[i].Message, maxAgentEventText)
			vs[i].ConstraintID = clip(vs[i].ConstraintID, 100)
		}
		var err error
		if violations, err = json.Marshal(vs); err != nil {
			return err
		}
	}
	_, err := q.Exec(ctx, `INSERT INTO agent_events (run_id, node_id, kind, tool, text, allowed, violations)
		VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), $6, $7)`,
		runID, nodeID, clip(ev.Kind, 40), clip(ev.Tool, 200), clip(ev.Text, maxAgentEventText), allowed, violations)
	return err
}

// ListAgentEventsAfter returns a run's agent events with an id above after,
// oldest first.
func ListAgentEventsAfter(ctx context.Context, q Querier, runID string, after int64) ([]AgentEvent, error) {
	rows, err := q.Query(ctx, `SELECT id, node_id, kind, coalesce(tool, ''), coalesce(text, ''), allowed, violations, created_at
		FROM agent_events WHERE run_id = $1 AND id > $2 ORDER BY id`, runID, after)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanAgentEvent)
}

// RecentAgentEvents returns a run's newest agent events, newest first, at
// most limit.
func RecentAgentEvents(ctx context.Context, q Querier, runID string, limit int) ([]AgentEvent, error) {
	rows, err := q.Query(ctx, `SELECT id, node_id, kind, coalesce(tool, ''), coalesce(text, ''), allowed, violations, created_at
		FROM agent_events WHERE run_id = $1 ORDER BY id DESC LIMIT $2`, runID, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanAgentEvent)
}

func scanAgentEvent(r pgx.CollectableRow) (AgentEvent, error) {
	var e AgentEvent
	var allowed *bool
	var violations []byte
	if err := r.Scan(&e.ID, &e.NodeID, &e.Kind, &e.Tool, &e.Text, &allowed, &violations, &e.At); err != nil {
		return e, err
	}
	if allowed != nil {
		e.Decision = &meshtype.ToolDecision{Tool: e.Tool, Summary: e.Text, Allowed: *allowed}
		if len(violations) > 0 {
			if err := json.Unmarshal(violations, &e.Decision.Violations); err != nil {
				return e, err
			}
		}
	}
	return e, nil
}

// clip cuts s to at most n bytes of valid UTF-8 without NUL (which
// Postgres refuses in text and in jsonb alike).
func clip(s string, n int) string {
	return textcut.Valid(pgtext.Scrub(s), n)
}
