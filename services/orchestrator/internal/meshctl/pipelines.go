package meshctl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/cligroup"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
)

func (a *app) pipelinesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pipelines",
		Short: "List the pipelines a run can be started of",
	}
	cligroup.Group(cmd)
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the pipelines with their inputs",
		Args:  exactArgs(),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, _ []string) error {
			ps, err := c.Pipelines(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.json() {
				return printJSON(out, map[string]any{"pipelines": nonNil(ps)})
			}
			tw := newTable(out)
			tw.println("NAME\tINPUTS\tHASH\tDESCRIPTION")
			for _, p := range ps {
				tw.printf("%s\t%s\t%s\t%s\n", p.Name, inputsText(p), short(p.Hash), oneLine(p.Description, 80))
			}
			return tw.done()
		}),
	})
	return cmd
}

// inputsText is "task (string, required), depth (number)".
func inputsText(p apiclient.Pipeline) string {
	if len(p.Inputs) == 0 {
		return "-"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(p.Inputs)) {
		in := p.Inputs[name]
		s := fmt.Sprintf("%s (%s", name, in.Type)
		if in.Required {
			s += ", required"
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, ", ")
}
