// Command mesh-exec is the MCP server inside agent worker containers: its
// mesh_execute tool runs a coding-agent CLI (Claude Code, Codex, ...) on a
// repository and resumes the agent's session across calls.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.NewRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesh-exec:", err)
		os.Exit(1)
	}
}
