package store_test

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/migrations"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// Migration 00003 applies on a database at 00002 (as an existing
// deployment's), adding runs' trace context beside their rows, and goes
// down again.
func TestRunTraceMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := migrations.Open(pgtest.EmptyDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	applied, err := migrations.Apply(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range applied {
		found = found || (a.Version == 3 && a.Name == "00003_run_trace.sql")
	}
	if !found {
		t.Fatalf("applied %+v, want 00003_run_trace.sql as version 3", applied)
	}
	columns := func() string {
		t.Helper()
		var cols []string
		rows, err := db.QueryContext(ctx, `SELECT column_name FROM information_schema.columns WHERE table_name = 'runs' AND column_name LIKE 'trace%' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				t.Fatal(err)
			}
			cols = append(cols, c)
		}
		return strings.Join(cols, ",")
	}
	if got := columns(); got != "traceparent,tracestate" {
		t.Fatalf("runs' trace columns %q", got)
	}
	// A run of before the migration (no trace) reads as one without.
	if _, err := db.ExecContext(ctx, `INSERT INTO runs (pipeline, pipeline_hash, thread, status) VALUES ('p', 'h', 't', 'running')`); err != nil {
		t.Fatal(err)
	}
	if err := down(ctx, db); err != nil {
		t.Fatal(err)
	}
	if got := columns(); got != "" {
		t.Errorf("after down, runs' trace columns %q", got)
	}
}

// down runs the Down section of 00003_run_trace.sql, as goose would roll
// it back (the migrations package applies only).
func down(ctx context.Context, db *sql.DB) error {
	src, err := fs.ReadFile(migrations.FS(), "00003_run_trace.sql")
	if err != nil {
		return err
	}
	_, stmt, ok := strings.Cut(string(src), "-- +goose Down")
	if !ok {
		return errors.New("00003_run_trace.sql has no Down section")
	}
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// A run keeps a valid trace context and shows its trace id; a malformed
// traceparent or an oversized tracestate from a caller is not kept.
func TestRunTraceContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := b.newRun(t, store.NewRun{Traceparent: tp, Tracestate: "vendor=x"})
	got, err := store.GetRun(b.ctx, b.pool, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || got.Traceparent != tp || got.Tracestate != "vendor=x" || r.TraceID != got.TraceID {
		t.Errorf("run %+v: want its trace context kept and trace id shown", got)
	}
	lease, ok, err := store.ClaimLease(b.ctx, b.pool, r.ID, "me", 10e9, "")
	if err != nil || !ok || lease.Run.Traceparent != tp || lease.Run.TraceID != got.TraceID {
		t.Errorf("ClaimLease's run %+v (%v, %v): want its trace context", lease.Run, ok, err)
	}
	for _, n := range []store.NewRun{
		{Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{Traceparent: "garbage", Tracestate: "a=b"},
		{Traceparent: tp + strings.Repeat("-x", 100)},
	} {
		r := b.newRun(t, n)
		if r.TraceID != "" || r.Traceparent != "" || r.Tracestate != "" {
			t.Errorf("traceparent %q kept as %+v", n.Traceparent, r)
		}
	}
	r = b.newRun(t, store.NewRun{Traceparent: tp, Tracestate: strings.Repeat("k=v,", 200)})
	if r.TraceID == "" || r.Tracestate != "" {
		t.Errorf("oversized tracestate: run %+v, want the trace without it", r)
	}
}
