// Package cli is the orchestrator's command line: the cobra command tree that
// main runs (version, migrate, serve, mcp, healthcheck).
package cli

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/migrations/migratecmd"
	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/healthprobe"
)

// NewRoot builds the orchestrator command tree. Commands log to logger and
// read their environment from the process.
func NewRoot(logger *slog.Logger) *cobra.Command {
	root := &cobra.Command{
		Use:   "orchestrator",
		Short: "Runs multi-agent pipelines as checkpointed graphs",
		Long: `orchestrator runs pipelines written in YAML (researcher -> writer ->
reviewer), checkpointing every node's result and every role's agent session
in Postgres (DATABASE_URL).

Configuration precedence is flag > environment > file > default. Secrets and
the database (DATABASE_URL) come from the environment only.`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(buildinfo.Command("orchestrator"), migratecmd.New(logger),
		newServeCommand(logger, os.Getenv), newMCPCommand(logger, os.Getenv),
		healthprobe.Command("http://127.0.0.1:8090/healthz"))
	return root
}
