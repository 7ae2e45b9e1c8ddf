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

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/buildinfo"
)

func main() {
	root := &cobra.Command{
		Use:   "mesh-exec",
		Short: "MCP server that runs coding-agent CLIs with session resume (tool mesh_execute)",
		Long: `mesh-exec serves one MCP tool, mesh_execute, which runs a coding-agent CLI
on a repository inside the workspace root and resumes the agent's session
across calls.`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(buildinfo.Command("mesh-exec"))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesh-exec:", err)
		os.Exit(1)
	}
}
