// Command meshctl is the command line for Meshwork's orchestrator: start
// pipeline runs, watch them, and inspect, fork, approve or cancel them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshwork/meshwork/services/orchestrator/internal/meshctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := meshctl.Execute(ctx, meshctl.NewRoot())
	stop()
	os.Exit(code)
}
