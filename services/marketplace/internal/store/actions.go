package store

// The audit log: one row per action, and one per agent tool call under it.

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtext"
	"github.com/meshwork/meshwork/pkg/textcut"
)

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

// RecordAction writes an audit row, its agent's tool calls' rows (under it,
// in order) and the journey's counters in one statement: one round trip,
// atomic without a transaction, on every action's path, so the counters the
// gate reads always match the audit log. Every action adds its cost and
// marks the journey used; an allowed action that is not Uncounted also adds
// to its action count.
//
// Its target, error and violations, and the tool calls' text, come from
// clients, workers and agents' output: a NUL character, which Postgres
// refuses in text and jsonb, is written there as U+FFFD, so that no output
// can keep an action out of the audit log and its journey's counts. The
// other fields are the marketplace's own (the journey's row, the action's
// type, a trace id in hex). The journey's cost stops at the most its column
// holds (numeric(14, 6)): agents report what they like, up to $1e6 an
// action, and a sum past the column would fail the statement and lose the
// row and the count with it.
func (s *Store) RecordAction(ctx context.Context, r ActionRecord) error {
	violations, err := json.Marshal(scrubbedViolations(r.Violations))
	if err != nil {
		return err
	}
	targets := make([]string, len(r.ToolCalls))
	decisions := make([]string, len(r.ToolCalls))
	callViolations := make([]string, len(r.ToolCalls))
	for i, c := range r.ToolCalls {
		decisions[i] = string(DecisionAllowed)
		if !c.Allowed {
			decisions[i] = string(DecisionRefused)
		}
		vs, err := json.Marshal(scrubbedViolations(c.Violations))
		if err != nil {
			return err
		}
		targets[i], callViolations[i] = pgtext.Scrub(c.Tool+": "+c.Summary), string(vs)
	}
	counted := 0
	if r.Decision == DecisionAllowed && !r.Uncounted {
		counted = 1
	}
	if _, err := s.pool.Exec(ctx, `WITH action AS (
			INSERT INTO actions (journey_uid, caller, worker_id, definition_hash, action_type, target,
				decision, violations, error, duration_us, request_bytes, response_bytes, cost_usd, trace_id)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''), $7, $8, nullif($9, ''), $10, $11, $12, $13, nullif($14, '')) RETURNING id
		), calls AS (
			INSERT INTO actions (journey_uid, caller, worker_id, definition_hash, action_type, target,
				decision, violations, trace_id, parent_action_id)
			SELECT $1, $2, $3, $4, $15, c.target, c.decision, c.violations, nullif($14, ''), action.id
			FROM action, unnest($16::text[], $17::text[], $18::jsonb[]) WITH ORDINALITY AS c(target, decision, violations, n)
			ORDER BY c.n
		)
		UPDATE journeys SET action_count = action_count + $19, cost_usd = least(cost_usd + $13, 99999999.999999), last_used_at = now() WHERE uid = $1`,
		r.JourneyUID, r.Caller, r.WorkerID, r.DefinitionHash, r.ActionType, auditText(r.Target),
		string(r.Decision), violations, auditText(r.Error), r.Duration.Microseconds(), r.RequestBytes, r.ResponseBytes, r.CostUSD, r.TraceID,
		ActionTypeAgentTool, targets, decisions, callViolations, counted); err != nil {
		return fmt.Errorf("recording action: %w", err)
	}
	return nil
}

// MaxAuditText bounds each text an audit row keeps (a target, an error, a
// violation's message): they quote what a client or an agent sent, and a
// refused action costs its caller nothing, so its row must cost the log
// little; a page of journey_audit reads hundreds of them.
const MaxAuditText = 4096

// auditText is s as an audit row keeps it: valid UTF-8 without NUL bytes,
// at most MaxAuditText bytes and a mark where it was cut.
func auditText(s string) string {
	if len(s) > MaxAuditText {
		s = textcut.Valid(s, MaxAuditText) + " …"
	}
	return pgtext.Scrub(s)
}

// scrubbedViolations is vs, never nil, with their text as audit rows keep
// it.
func scrubbedViolations(vs []meshtype.Violation) []meshtype.Violation {
	out := make([]meshtype.Violation, len(vs))
	for i, v := range vs {
		v.ConstraintID, v.Message = auditText(v.ConstraintID), auditText(v.Message)
		out[i] = v
	}
	return out
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
