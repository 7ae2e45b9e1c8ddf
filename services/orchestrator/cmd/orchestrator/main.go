// Command orchestrator runs Meshwork's multi-agent pipelines: YAML graphs of
// roles and nodes, checkpointed in Postgres so runs survive crashes and can be
// forked from any checkpoint.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/migrations/migratecmd"
	"github.com/meshwork/meshwork/pkg/buildinfo"
)

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	root := &cobra.Command{
		Use:   "orchestrator",
		Short: "Runs multi-agent pipelines as checkpointed graphs",
		Long: `orchestrator runs pipelines written in YAML (researcher -> writer ->
reviewer), checkpointing every node's result and every role's agent session
in Postgres (DATABASE_URL).

Configuration precedence is flag > environment > file. Secrets and the
database (DATABASE_URL) come from the environment only.`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(buildinfo.Command("orchestrator"), migratecmd.New(logger))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}
