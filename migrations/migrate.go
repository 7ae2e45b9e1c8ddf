package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
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
	return out, nil
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
	return out, nil
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}
