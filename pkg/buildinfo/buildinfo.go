// Package buildinfo is what every Meshwork binary reports about its build:
// the version stamped in at link time and the Go toolchain that built it.
package buildinfo

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// Version is set at link time:
//
//	go build -ldflags "-X github.com/meshwork/meshwork/pkg/buildinfo.Version=v1.2.3"
//
// The Makefile stamps it from `git describe`.
var Version = "dev"

// String is the one-line version of a binary: "marketplace v1.2.3 (go1.26.8 linux/amd64)".
func String(binary string) string {
	return fmt.Sprintf("%s %s (%s %s/%s)", binary, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Command is the `version` subcommand of a binary.
func Command(binary string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), String(binary))
			return err
		},
	}
}
