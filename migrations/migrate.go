package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// VersionTable is where goose records applied migrations.
const VersionTable = "meshwork_schema_migrations"

// Applied is one migration applied by Apply.
type Applied struct {
	Version  int64
	Name     string
	Duration time.Duration
}

// State is one migration's state in a database.
type State struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time
}

// Open opens a database/sql handle on dsn through pgx, for migrating. Callers
// close it.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := pgxConfig(dsn)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg), nil
}

func newProvider(db *sql.DB, logger *slog.Logger) (*goose.Provider, error) {
	// Poll for the lock every second for up to ten minutes: a replica waiting
	// behind another's migration should not give up while it is still running.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
	if err != nil {
		return nil, fmt.Errorf("creating the migration lock: %w", err)
	}
	opts := []goose.ProviderOption{
		goose.WithSessionLocker(locker),
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
	}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	return goose.NewProvider(goose.DialectPostgres, db, files, opts...)
}

// Apply applies every pending migration, under a Postgres advisory lock, and
// returns what it applied (nothing when the schema is current).
func Apply(ctx context.Context, db *sql.DB, logger *slog.Logger) ([]Applied, error) {
	p, err := newProvider(db, logger)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("applying migrations: %w", err)
	}
	out := make([]Applied, 0, len(results))
	for _, r := range results {
		out = append(out, Applied{Version: r.Source.Version, Name: baseName(r.Source.Path), Duration: r.Duration})
	}
	river, err := applyRiver(ctx, db)
	if err != nil {
		return nil, err
	}
	return append(out, river...), nil
}

// RiverVersionOffset numbers River's own migrations in what Apply and Status
// report: River's migration N is reported as RiverVersionOffset+N, named
// "river_<name>".
const RiverVersionOffset = 1000

// applyRiver applies the migrations of River, the orchestrator's job queue,
// through River's own migrator (its tables are River's to define), one
// version per transaction (a version may add an enum value that the next
// one uses, which Postgres refuses within one transaction), each under an
// advisory lock so that replicas starting at once are safe.
func applyRiver(ctx context.Context, db *sql.DB) ([]Applied, error) {
	var out []Applied
	for {
		applied := false
		err := withPgxTx(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('meshwork_river_migrate'))"); err != nil {
				return err
			}
			m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
			if err != nil {
				return err
			}
			// One version per transaction, as Migrate does; MigrateTx because
			// the handle here is database/sql (pgx underneath), not a pool.
			res, err := m.MigrateTx(ctx, tx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{MaxSteps: 1}) //nolint:staticcheck // see above
			if err != nil {
				return err
			}
			for _, v := range res.Versions {
				applied = true
				out = append(out, Applied{Version: RiverVersionOffset + int64(v.Version), Name: "river_" + v.Name, Duration: v.Duration})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("applying River's migrations: %w", err)
		}
		if !applied {
			return out, nil
		}
	}
}

// riverStatus reports River's migrations.
func riverStatus(ctx context.Context, db *sql.DB) ([]State, error) {
	var out []State
	err := withPgxTx(ctx, db, func(tx pgx.Tx) error {
		m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
		if err != nil {
			return err
		}
		// A database River never touched has no river_migration table.
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass('river_migration') IS NOT NULL").Scan(&exists); err != nil {
			return err
		}
		applied := map[int]time.Time{}
		if exists {
			// River's migrator reports versions without their time; its
			// table has both.
			rows, err := tx.Query(ctx, "SELECT version, created_at FROM river_migration WHERE line = 'main'")
			if err != nil {
				return err
			}
			var v int
			var at time.Time
			if _, err := pgx.ForEachRow(rows, []any{&v, &at}, func() error { applied[v] = at; return nil }); err != nil {
				return err
			}
		}
		for _, v := range m.AllVersions() {
			at, ok := applied[v.Version]
			out = append(out, State{Version: RiverVersionOffset + int64(v.Version), Name: "river_" + v.Name, Applied: ok, AppliedAt: at})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading River's migration status: %w", err)
	}
	return out, nil
}

// withPgxTx runs fn in a transaction on one of db's connections, as pgx sees
// it: River's migrator speaks pgx, and db is pgx underneath.
func withPgxTx(ctx context.Context, db *sql.DB, fn func(pgx.Tx) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return conn.Raw(func(driverConn any) error {
		c, ok := driverConn.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("database handle is not pgx (%T)", driverConn)
		}
		return pgx.BeginFunc(ctx, c.Conn(), fn)
	})
}

// Status reports every known migration and whether the database has it.
func Status(ctx context.Context, db *sql.DB) ([]State, error) {
	p, err := newProvider(db, nil)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading migration status: %w", err)
	}
	out := make([]State, 0, len(st))
	for _, s := range st {
		out = append(out, State{Version: s.Source.Version, Name: baseName(s.Source.Path), Applied: s.State == goose.StateApplied, AppliedAt: s.AppliedAt})
	}
	river, err := riverStatus(ctx, db)
	if err != nil {
		return nil, err
	}
	return append(out, river...), nil
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
