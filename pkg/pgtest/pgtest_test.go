package pgtest_test

import (
	"context"
	"io/fs"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/migrations"
	"github.com/meshwork/meshwork/pkg/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func tables(t *testing.T, dsn string) []string {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(context.Background(), "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY table_name")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// Migrations apply to an empty database, and a second run applies nothing
// and changes nothing.
func TestMigrationsApplyTwice(t *testing.T) {
	t.Parallel()
	dsn := pgtest.EmptyDSN(t)
	db, err := migrations.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()

	first, err := migrations.Apply(ctx, db, nil)
	if err != nil {
		t.Fatalf("first apply: %v", err)
	}
	if len(first) == 0 {
		t.Fatal("first apply applied nothing")
	}
	before := tables(t, dsn)
	second, err := migrations.Apply(ctx, db, nil)
	if err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if len(second) != 0 {
		t.Errorf("second apply applied %v", second)
	}
	if after := tables(t, dsn); len(after) != len(before) {
		t.Errorf("tables changed: %v -> %v", before, after)
	}
	for _, want := range []string{"actions", "api_tokens", "journeys", migrations.VersionTable} {
		found := false
		for _, n := range before {
			found = found || n == want
		}
		if !found {
			t.Errorf("table %s missing; have %v", want, before)
		}
	}
	st, err := migrations.Status(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("migration %d %s not applied", s.Version, s.Name)
		}
	}
}

// Two migrators starting at once on an empty database both succeed, and each
// migration is applied exactly once, thanks to the advisory lock.
func TestConcurrentMigrators(t *testing.T) {
	t.Parallel()
	dsn := pgtest.EmptyDSN(t)
	ctx := context.Background()
	const n = 2
	results := make([][]migrations.Applied, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			db, err := migrations.Open(dsn)
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			<-start
			results[i], errs[i] = migrations.Apply(ctx, db, nil)
		})
	}
	close(start)
	wg.Wait()
	applied := map[int64]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		for _, a := range results[i] {
			applied[a.Version]++
		}
	}
	files, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations found: %v", err)
	}
	ours, river := 0, 0
	for v := range applied {
		if v >= migrations.RiverVersionOffset {
			river++
		} else {
			ours++
		}
	}
	if ours != len(files) || river == 0 {
		t.Errorf("applied versions %v, want all %d of ours and River's", applied, len(files))
	}
	for v, c := range applied {
		if c != 1 {
			t.Errorf("migration %d applied %d times", v, c)
		}
	}
}

// Each test's database is its own: what one test writes another cannot see.
func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.Pool(t), pgtest.Pool(t)
	if _, err := a.Exec(ctx, "INSERT INTO api_tokens (caller, token_sha256) VALUES ('alice', sha256('x'))"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM api_tokens").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("second database sees %d rows of the first", n)
	}
	if err := a.QueryRow(ctx, "SELECT count(*) FROM api_tokens").Scan(&n); err != nil || n != 1 {
		t.Errorf("first database: %d rows, %v", n, err)
	}
}
