// Package cligroup makes a cobra command that only groups others refuse a
// word that names none of them. Cobra runs such a command for any
// arguments, printing its help and exiting 0, so a mistyped subcommand
// (meshctl runs get) looked as if it had worked.
package cligroup

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Group makes cmd refuse a first word that is none of its subcommands,
// suggesting the nearest as cobra does at the root; with no word, or with
// "help", it prints its help. It returns cmd.
func Group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 || args[0] == "help" {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set where it suggests
		}
		if near := cmd.SuggestionsFor(args[0]); len(near) > 0 && !cmd.DisableSuggestions {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(near, "\n\t")
		}
		return errors.New(msg)
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}
