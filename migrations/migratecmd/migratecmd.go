// Package migratecmd is the `migrate` subcommand the marketplace and the
// orchestrator share: both own tables of the one schema, and either may be
// the first to start.
package migratecmd

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/migrations"
)

// New returns `migrate` (apply pending migrations) with its `status`
// subcommand. The database comes from DATABASE_URL.
func New(logger *slog.Logger) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations (DATABASE_URL)",
		Long: `Apply every pending database migration to the database named by the
DATABASE_URL environment variable, e.g.
  DATABASE_URL=postgres://meshwork:secret@localhost:5432/meshwork?sslmode=disable

Migrations run under a Postgres advisory lock, so replicas starting at once
are safe: one applies, the others wait and then find nothing to do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withDB(cmd.Context(), func(ctx context.Context, db *sql.DB) error {
				applied, err := migrations.Apply(ctx, db, logger)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if len(applied) == 0 {
					_, err = fmt.Fprintln(out, "schema is up to date")
					return err
				}
				for _, a := range applied {
					if _, err := fmt.Fprintf(out, "applied %05d %s (%s)\n", a.Version, a.Name, a.Duration.Round(1e6)); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "List migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withDB(cmd.Context(), func(ctx context.Context, db *sql.DB) error {
				states, err := migrations.Status(ctx, db)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				_, _ = fmt.Fprintln(w, "VERSION\tNAME\tAPPLIED")
				for _, s := range states {
					at := "pending"
					if s.Applied {
						at = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
					}
					_, _ = fmt.Fprintf(w, "%05d\t%s\t%s\n", s.Version, s.Name, at)
				}
				return w.Flush()
			})
		},
	})
	return cmd
}

func withDB(ctx context.Context, fn func(context.Context, *sql.DB) error) error {
	db, err := migrations.Open(os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	return fn(ctx, db)
}
