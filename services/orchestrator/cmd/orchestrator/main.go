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

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/internal/cli"
)

func main() {
	// JSON lines on stderr, with the trace and span ids of the context
	// each line is logged with.
	logger := telemetry.NewLogger(os.Stderr, slog.LevelInfo)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.NewRoot(logger).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}
