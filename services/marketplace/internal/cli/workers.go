package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/cligroup"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/workers"
)

func newWorkersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "Inspect and validate worker catalogs",
	}
	cligroup.Group(cmd)
	var dir string
	load := func() (*workerdef.Catalog, error) {
		fsys := workers.FS()
		if dir != "" {
			fsys = os.DirFS(dir)
		}
		return workerdef.Load(fsys)
	}
	cmd.PersistentFlags().StringVar(&dir, "catalog", "", "catalog directory of *.yaml definitions (default: the built-in catalog)")

	cmd.AddCommand(&cobra.Command{
		Use:   "validate",
		Short: "Load a catalog and report every error as file:line:col: message",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := load()
			if err != nil {
				return fmt.Errorf("catalog is invalid:\n%w", err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "ok: %d workers\n", len(cat.Entries()))
			return err
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the workers of a catalog",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := load()
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			_, _ = fmt.Fprintln(w, "ID\tKIND\tTOOLS\tNAME")
			for _, e := range cat.Entries() {
				d := e.Definition
				_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", d.ID, d.Kind, strings.Join(d.Tools, ","), d.Name)
			}
			return w.Flush()
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "describe WORKER_ID",
		Short: "Print a worker's resolved definition (after extends and defaults) as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := load()
			if err != nil {
				return err
			}
			e, ok := cat.Lookup(args[0])
			if !ok {
				return fmt.Errorf("no worker %q in the catalog (see `marketplace workers list`)", args[0])
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				Hash       string `json:"definition_hash"`
				File       string `json:"file"`
				Definition any    `json:"definition"`
			}{e.Hash, e.File, e.Definition})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the worker definition format",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(workers.Schema())
			return err
		},
	})
	return cmd
}
