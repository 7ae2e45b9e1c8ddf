// Command marketplace is Meshwork's MCP server: it spawns workers described in
// YAML into isolated containers and gates every action they are asked to run.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshwork/meshwork/services/marketplace/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.NewRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "marketplace:", err)
		os.Exit(1)
	}
}
