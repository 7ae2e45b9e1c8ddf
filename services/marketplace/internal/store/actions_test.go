package store_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newJourney(tb testing.TB) (*store.Store, store.Journey) {
	tb.Helper()
	s := store.New(pgtest.Pool(tb))
	j, err := s.CreateJourney(context.Background(), store.Journey{Caller: "alice", ID: "j", WorkerID: "w_v1", DefinitionHash: "h", IsolationLevel: "container"}, store.Quota{PerCaller: 10, Total: 10})
	if err != nil {
		tb.Fatal(err)
	}
	return s, j
}

// An action's row, its agent's tool calls under it in their order, and the
// journey's counters are written together; only an allowed, counted action
// counts, and every action's spend. Text with a NUL character (an agent's
// output) is written all the same.
func TestRecordAction(t *testing.T) {
	t.Parallel()
	s, j := newJourney(t)
	ctx := context.Background()
	rec := func(d store.Decision) store.ActionRecord {
		return store.ActionRecord{JourneyUID: j.UID, Caller: "alice", WorkerID: "w_v1", DefinitionHash: "h", ActionType: "task", Decision: d, CostUSD: 0.25, TraceID: "t1"}
	}
	task := rec(store.DecisionAllowed)
	task.ToolCalls = []meshtype.ToolDecision{
		{Tool: "Read", Summary: "Reading a.go", Allowed: true},
		{Tool: "Edit", Summary: "Editing .env", Violations: []meshtype.Violation{{ConstraintID: "denied_paths", Violated: true, Message: "denied"}}},
		{Tool: "Bash", Summary: "Running go test", Allowed: true},
		{Tool: "Write", Summary: "Writing a\x00b", Violations: []meshtype.Violation{{ConstraintID: "x\x00", Violated: true, Message: "m\x00"}}},
	}
	task.Error = "partial output \x00"
	refused := rec(store.DecisionRefused)
	refused.CostUSD = 0.5
	diff := rec(store.DecisionAllowed)
	diff.ActionType, diff.Uncounted, diff.CostUSD = "workspace_diff", true, 0
	for _, r := range []store.ActionRecord{task, refused, diff} {
		if err := s.RecordAction(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	rows, err := s.Actions(ctx, j.UID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		line := r.ActionType + " " + string(r.Decision) + " " + r.Target
		if r.ParentID != 0 {
			line += " under " + map[bool]string{true: "the task", false: "?"}[r.ParentID == rows[0].ID]
		}
		got = append(got, line)
	}
	want := []string{
		"task allowed ",
		"agent_tool allowed Read: Reading a.go under the task",
		"agent_tool refused Edit: Editing .env under the task",
		"agent_tool allowed Bash: Running go test under the task",
		"agent_tool refused Write: Writing a\uFFFDb under the task",
		"task refused ",
		"workspace_diff allowed ",
	}
	if len(got) != len(want) {
		t.Fatalf("audit rows:\n%q\nwant\n%q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: %q, want %q", i, got[i], want[i])
		}
	}
	if v := rows[2].Violations; len(v) != 1 || v[0].ConstraintID != "denied_paths" {
		t.Errorf("the refused tool call's violations: %+v", v)
	}
	if v := rows[4].Violations; len(v) != 1 || v[0].Message != "m\uFFFD" {
		t.Errorf("the violations with a NUL: %+v", v)
	}
	if rows[0].Error != "partial output \uFFFD" {
		t.Errorf("the error with a NUL: %q", rows[0].Error)
	}
	after, err := s.JourneyByUID(ctx, j.UID)
	if err != nil {
		t.Fatal(err)
	}
	if after.ActionCount != 1 || after.CostUSD != 0.75 {
		t.Errorf("journey counters: %d actions, $%v; want 1 and $0.75", after.ActionCount, after.CostUSD)
	}
}

// Agents report their own cost, up to $1e6 an action: a journey's sum stops
// at the most its column holds instead of failing the statement, so the
// audit rows and the action count keep being written.
func TestRecordActionPastTheCostColumn(t *testing.T) {
	t.Parallel()
	s, j := newJourney(t)
	ctx := context.Background()
	const actions = 101 // $1e6 each: the 100th passes $1e8
	for range actions {
		if err := s.RecordAction(ctx, store.ActionRecord{JourneyUID: j.UID, Caller: "alice", WorkerID: "w_v1", DefinitionHash: "h", ActionType: "task", Decision: store.DecisionAllowed, CostUSD: 1e6}); err != nil {
			t.Fatalf("RecordAction: %v", err)
		}
	}
	after, err := s.JourneyByUID(ctx, j.UID)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Actions(ctx, j.UID)
	if err != nil {
		t.Fatal(err)
	}
	if after.ActionCount != actions || len(rows) != actions || after.CostUSD < 99999999 || after.CostUSD >= 1e8 {
		t.Errorf("after %d actions of $1e6: %d counted, %d audit rows, $%v spent", actions, after.ActionCount, len(rows), after.CostUSD)
	}
}

// BenchmarkRecordAction is the audit row written after every action.
func BenchmarkRecordAction(b *testing.B) {
	s, j := newJourney(b)
	ctx := context.Background()
	r := store.ActionRecord{JourneyUID: j.UID, Caller: "alice", WorkerID: "w_v1", DefinitionHash: "h", ActionType: "read", Target: "a.go", Decision: store.DecisionAllowed}
	for b.Loop() {
		if err := s.RecordAction(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// An audit row keeps at most MaxAuditText bytes of each text a client or
// an agent sent (a target, an error, a violation's message), cut on a
// character and marked: a refused action costs its caller nothing, and
// must cost the log little.
func TestAuditTextIsBounded(t *testing.T) {
	t.Parallel()
	s, j := newJourney(t)
	ctx := context.Background()
	long := strings.Repeat("é", 1<<20)
	r := store.ActionRecord{
		JourneyUID: j.UID, Caller: "alice", WorkerID: "w_v1", DefinitionHash: "h", ActionType: "read",
		Target: long, Error: long, Decision: store.DecisionRefused,
		Violations: []meshtype.Violation{{ConstraintID: "denied_paths", Violated: true, Message: long}},
	}
	if err := s.RecordAction(ctx, r); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Actions(ctx, j.UID)
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %v, %v", rows, err)
	}
	got := rows[0]
	for name, text := range map[string]string{"target": got.Target, "error": got.Error, "violation": got.Violations[0].Message} {
		if len(text) > store.MaxAuditText+8 || !utf8.ValidString(text) || !strings.HasPrefix(text, "éé") || !strings.HasSuffix(text, "…") {
			t.Errorf("the %s kept %d bytes (valid UTF-8: %v), want at most %d, cut and marked", name, len(text), utf8.ValidString(text), store.MaxAuditText)
		}
	}
}
