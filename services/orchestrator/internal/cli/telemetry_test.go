package cli

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// The pool traces a query made in a span, as that span's child, and makes
// no span of a query with none around it (River's polling). Not parallel:
// it sets the global tracer provider.
func TestPoolTracesQueries(t *testing.T) {
	// The database first: starting its container makes Docker client spans,
	// which are not the pool's.
	dsn := pgtest.DSN(t)
	rec := telemetrytest.Record(t)

	pc, err := poolConfig(dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans of a query outside any span, want none", n)
	}
	spanCtx, parent := telemetry.Tracer().Start(ctx, "node")
	if _, err := pool.Exec(spanCtx, "SELECT count(*) FROM runs"); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var query sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() != "node" {
			query = s
		}
	}
	if query == nil {
		t.Fatal("no span of the query")
	}
	if query.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("query span %q's parent %s, want the node's", query.Name(), query.Parent().SpanID())
	}
	if system := telemetrytest.Attrs(query.Attributes())["db.system.name"]; system != "postgresql" {
		t.Errorf("query span's db.system.name %q, attributes %v", system, query.Attributes())
	}
}
