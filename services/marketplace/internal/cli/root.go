// Package cli is the marketplace's command line: the cobra command tree that
// main runs.
package cli

import (
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/migrations/migratecmd"
	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/healthprobe"
	"github.com/meshwork/meshwork/pkg/telemetry"
)

// NewRoot builds the marketplace command tree.
func NewRoot() *cobra.Command {
	// JSON lines on stderr; a record logged with a context that holds a span
	// carries its trace_id and span_id.
	logger := telemetry.NewLogger(os.Stderr, slog.LevelInfo)
	root := &cobra.Command{
		Use:   "marketplace",
		Short: "Meshwork's MCP server: spawns YAML-defined workers into isolated containers and gates every action",
		Long: `marketplace serves Meshwork's worker marketplace over MCP: clients call
spawn_worker to start a worker from the catalog in its own container, then
execute_in_worker to run actions there, each checked by the worker's
constraint gate first.

Configuration precedence is flag > environment > file. Secrets and the
database (DATABASE_URL) come from the environment only.`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(buildinfo.Command("marketplace"), migratecmd.New(logger), newWorkersCommand(), newServeCommand(logger),
		// The image is FROM scratch: the compose health check runs this.
		healthprobe.Command("http://127.0.0.1:8080/healthz"))
	return root
}
