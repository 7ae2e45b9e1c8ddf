package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// BenchmarkRunsPages measures the runs list a person pages through, with
// 10,000 runs in the database: alice's 2,500 of them among bob's and
// carol's, across three pipelines and five statuses. Each sub-benchmark is
// one page, rendered and read over HTTP as a browser gets it: the first
// page, filtered by status, by pipeline, by both, and a page deep in the
// list (?before= the 2,000th of alice's runs).
func BenchmarkRunsPages(b *testing.B) {
	s := start(b)
	ctx := context.Background()
	const runs = 10_000
	if _, err := s.pool.Exec(ctx, `INSERT INTO runs (pipeline, pipeline_hash, thread, caller, status, head_seq, created_at, updated_at, finished_at)
		SELECT (ARRAY['echo', 'approval', 'signoff'])[1 + i % 3], 'h', gen_random_uuid()::text,
		       (ARRAY['alice', 'bob', 'carol', 'bob'])[1 + i % 4],
		       (ARRAY['succeeded', 'succeeded', 'failed', 'waiting', 'cancelled', 'running'])[1 + i % 6], 3,
		       now() - i * interval '1 minute', now() - i * interval '1 minute',
		       CASE WHEN i % 6 IN (0, 1, 2, 4) THEN now() - i * interval '1 minute' + interval '30 seconds' END
		FROM generate_series(1, $1) AS i`, runs); err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE runs`); err != nil {
		b.Fatal(err)
	}
	var deep string
	if err := s.pool.QueryRow(ctx, `SELECT id::text FROM runs WHERE caller = 'alice' ORDER BY created_at DESC, id DESC OFFSET 1999 LIMIT 1`).Scan(&deep); err != nil {
		b.Fatal(err)
	}
	alice := s.browser()
	alice.signIn(aliceToken)
	for _, page := range []struct{ name, path string }{
		{"first", "/runs"},
		{"status", "/runs?status=failed"},
		{"pipeline", "/runs?pipeline=approval"},
		{"status+pipeline", "/runs?status=waiting&pipeline=echo"},
		{"deep", "/runs?before=" + deep},
	} {
		b.Run(page.name, func(b *testing.B) {
			var worst time.Duration
			for b.Loop() {
				start := time.Now()
				if resp, body := alice.get(page.path); resp.StatusCode != http.StatusOK {
					b.Fatalf("%s: %d %s", page.path, resp.StatusCode, body)
				}
				worst = max(worst, time.Since(start))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
			b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkRunPage50Nodes measures a run's page for a pipeline of 50 nodes
// (10 columns of 5, each node needing the column before), the run
// finished: the graph, the nodes, the outputs and the checkpoints, rendered
// over HTTP as a browser gets it.
func BenchmarkRunPage50Nodes(b *testing.B) {
	pipelines := fstest.MapFS{"grid.yaml": {Data: enginetest.Grid("grid", 10, 5)}}
	for name, f := range enginetest.Pipelines {
		pipelines[name] = f
	}
	s := startWith(b, pipelines)
	viewer := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	run, err := s.eng.StartRun(viewer, engine.StartRequest{Pipeline: "grid", Caller: "alice"})
	if err != nil {
		b.Fatal(err)
	}
	if v := s.settle(run.ID); v.Status != runstate.RunSucceeded || len(v.Nodes) != 50 {
		b.Fatalf("the grid run: %s, %d nodes", v.Status, len(v.Nodes))
	}
	alice := s.browser()
	alice.signIn(aliceToken)
	var worst time.Duration
	for b.Loop() {
		start := time.Now()
		if resp, body := alice.get("/runs/" + run.ID); resp.StatusCode != http.StatusOK || !strings.Contains(body, "n09_4") {
			b.Fatalf("the run page: %d", resp.StatusCode)
		}
		worst = max(worst, time.Since(start))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
	b.ReportMetric(0, "ns/op")
}
