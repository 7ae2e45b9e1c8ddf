package migrations

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// pgxConfig parses a Postgres URL or keyword/value DSN, without echoing the
// DSN (it may hold a password) in the error.
func pgxConfig(dsn string) (*pgx.ConnConfig, error) {
	if dsn == "" {
		return nil, fmt.Errorf("no database: set DATABASE_URL, e.g. postgres://user:password@localhost:5432/meshwork")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing DATABASE_URL: invalid connection string")
	}
	return cfg, nil
}
