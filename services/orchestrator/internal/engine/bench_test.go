package engine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// benchExecutor answers every task at once with a short output and names
// its session only in the result: the benchmarks measure the engine (River
// hand-out, checkpoint commits), not an agent.
func benchExecutor() *enginetest.InstantExecutor {
	return &enginetest.InstantExecutor{Quiet: true, Reply: func(req executor.Request) (string, error) { return "done " + req.NodeID, nil }}
}

// benchEngine is an engine on a fresh database whose commits report to a
// channel per run, so a benchmark waits for a run without polling.
type benchEngine struct {
	eng  *engine.Engine
	pool *pgxpool.Pool
	// statements counts the SQL statements sent on the pool (River's
	// included), for the statements per step.
	statements *statementCounter
	mu         sync.Mutex
	done       map[string]chan struct{}
	lat        []time.Duration
	// started is when each run's StartRun was called; starts how long it
	// took, and firsts how long after the call the run's first node began
	// (the start's commit, then River's hand-out or the engine's own
	// chain).
	started map[string]time.Time
	starts  []time.Duration
	firsts  []time.Duration
}

func newBenchEngine(b *testing.B) *benchEngine {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = engine.PoolSize(0) // as serve sizes it
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	be := &benchEngine{pool: pool, done: map[string]chan struct{}{}, started: map[string]time.Time{}, statements: counter}
	eng, err := engine.New(engine.Config{
		Pool: pool, Catalog: loadTestCatalog(b), Executors: map[pipeline.Via]executor.Executor{pipeline.ViaMesh: benchExecutor()},
		OnCommit: func(c engine.CommitInfo) {
			// Before the lock, which a StartRun still under way holds.
			began := time.Now().Add(-c.CommitDuration - c.Duration)
			be.mu.Lock()
			defer be.mu.Unlock()
			be.lat = append(be.lat, c.CommitDuration)
			if t, ok := be.started[c.RunID]; ok {
				// The first commit: its node began Duration before it.
				be.firsts = append(be.firsts, began.Sub(t))
				delete(be.started, c.RunID)
			}
			if c.RunStatus != runstate.RunRunning {
				if ch, ok := be.done[c.RunID]; ok {
					close(ch)
					delete(be.done, c.RunID)
				}
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Stop(context.Background()) })
	be.eng = eng
	return be
}

// run starts one linear run and waits for it to end.
func (be *benchEngine) run(b *testing.B) {
	b.Helper()
	ch := make(chan struct{})
	// The run id is known only after the start commits; register under a
	// lock so a fast run cannot finish before its channel exists.
	be.mu.Lock()
	start := time.Now()
	run, err := be.eng.StartRun(context.Background(), engine.StartRequest{Pipeline: "linear", Inputs: map[string]any{"task": "t"}})
	if err != nil {
		be.mu.Unlock()
		b.Fatal(err)
	}
	be.done[run.ID] = ch
	be.started[run.ID] = start
	be.starts = append(be.starts, time.Since(start))
	be.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		b.Fatalf("run %s did not finish", run.ID)
	}
}

// statementCounter counts the statements a pool sends, one per query and
// one per query of a batch.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (*statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (*statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (*statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (be *benchEngine) report(b *testing.B, runs int, elapsed time.Duration) {
	b.Helper()
	const stepsPerRun = 3
	b.ReportMetric(float64(runs*stepsPerRun)/elapsed.Seconds(), "steps/s")
	// Everything the database was sent while the runs ran: the starts, the
	// steps, River's fetches and completions, per node-step.
	b.ReportMetric(float64(be.statements.n.Load())/float64(runs*stepsPerRun), "statements/step")
	be.mu.Lock()
	lat, starts, firsts := slices.Clone(be.lat), slices.Clone(be.starts), slices.Clone(be.firsts)
	be.mu.Unlock()
	p50 := func(d []time.Duration, unit string) {
		if len(d) > 0 {
			slices.Sort(d)
			b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, unit)
		}
	}
	p50(lat, "commit-p50-ms")
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "commit-p99-ms")
	}
	p50(starts, "start-p50-ms")
	p50(firsts, "first-node-p50-ms")
	count, bytes, err := store.CheckpointBytes(context.Background(), be.pool)
	if err != nil {
		b.Fatal(err)
	}
	// Checkpoints per step: a run's start is one more checkpoint than its
	// node steps; the bytes are divided by the node steps, so the start's
	// share is included.
	steps := count * stepsPerRun / (stepsPerRun + 1)
	if steps > 0 {
		b.ReportMetric(float64(bytes)/float64(steps), "checkpoint-B/step")
		// The whole table on disk, indexes and page overhead included.
		var table int64
		if err := be.pool.QueryRow(context.Background(), `SELECT pg_total_relation_size('checkpoints')`).Scan(&table); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(table)/float64(steps), "table-B/step")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLinearRuns measures node-steps per second of 3-node linear runs
// with a checkpoint after every node, one run at a time and 8 at once, the
// commit latency, and the stored checkpoint size per step.
func BenchmarkLinearRuns(b *testing.B) {
	for _, concurrency := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrent=%d", concurrency), func(b *testing.B) {
			be := newBenchEngine(b)
			be.run(b) // warm up: River's leader, the pool, the caches
			be.mu.Lock()
			be.lat, be.starts, be.firsts = nil, nil, nil
			be.mu.Unlock()
			be.statements.n.Store(0)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			next := make(chan struct{}, b.N)
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			for range concurrency {
				wg.Go(func() {
					for range next {
						be.run(b)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			be.report(b, b.N, elapsed)
		})
	}
}

// BenchmarkBaselineCheckpointer is the floor the engine is measured
// against, on the same database in the same run: per node step, one
// transaction that writes a checkpoint row and moves the run's head, as a
// bare checkpointer (no job queue, no lease, no attempt record) would. The
// ratio of the two steps/s is what the engine's durability costs on this
// machine.
func BenchmarkBaselineCheckpointer(b *testing.B) {
	for _, concurrency := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrent=%d", concurrency), func(b *testing.B) {
			be := newBenchEngine(b)
			ctx := context.Background()
			delta := []byte(`{"nodes":{"one":{"output":"done one","status":"succeeded","attempts":1,"iteration":1}}}`)
			runOnce := func() {
				var id string
				if err := be.pool.QueryRow(ctx, `INSERT INTO runs (pipeline, pipeline_hash, thread, status) VALUES ('linear', 'h', 't', 'running') RETURNING id::text`).Scan(&id); err != nil {
					b.Fatal(err)
				}
				for seq := range 4 { // the start and three nodes, as a linear run commits
					tx, err := be.pool.Begin(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := tx.Exec(ctx, `INSERT INTO checkpoints (run_id, seq, delta) VALUES ($1, $2, $3)`, id, seq, delta); err != nil {
						b.Fatal(err)
					}
					if _, err := tx.Exec(ctx, `UPDATE runs SET head_seq = $2, updated_at = now() WHERE id = $1`, id, seq); err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			start := time.Now()
			next := make(chan struct{}, b.N)
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			var wg sync.WaitGroup
			for range concurrency {
				wg.Go(func() {
					for range next {
						runOnce()
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N*3)/time.Since(start).Seconds(), "steps/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
