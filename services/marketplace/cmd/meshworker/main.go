// Command meshworker runs inside builtin worker containers and serves the
// file, search, exec and git actions as MCP tools over stdio, confined to
// /workspace. It is a static binary so worker images can be built FROM scratch.
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
		Use:   "meshworker",
		Short: "Serves workspace actions as MCP tools over stdio inside a worker container",
		Long: `meshworker is started by the marketplace inside builtin worker containers.
It serves read, write, list, search, exec and delete (and git for git
workers) as MCP tools over stdio, confined to the workspace.`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(buildinfo.Command("meshworker"), &cobra.Command{
		Use:   "idle",
		Short: "Wait until stopped: the worker container's main process",
		Long: `idle is the main process of a builtin worker container. It does nothing
until SIGTERM or SIGINT; the marketplace runs "meshworker serve" beside it
through exec sessions, so a broken session can be re-opened without
restarting the container.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			<-cmd.Context().Done()
			return nil
		},
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshworker:", err)
		os.Exit(1)
	}
}
