// Command meshctl is the command line for Meshwork's orchestrator: start
// pipeline runs, watch them, and inspect, fork, approve or cancel them.
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
		Use:           "meshctl",
		Short:         "Command line for Meshwork pipelines",
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(buildinfo.Command("meshctl"))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshctl:", err)
		os.Exit(1)
	}
}
