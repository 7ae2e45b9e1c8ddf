package cligroup_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/cligroup"
)

// run executes "tool runs args..." where runs groups list and show.
func run(args ...string) (string, error) {
	root := &cobra.Command{Use: "tool", SilenceUsage: true, SilenceErrors: true}
	runs := cligroup.Group(&cobra.Command{Use: "runs", Short: "Work with runs"})
	runs.AddCommand(
		&cobra.Command{Use: "list", Run: func(*cobra.Command, []string) {}},
		&cobra.Command{Use: "show", Run: func(*cobra.Command, []string) {}},
	)
	root.AddCommand(runs)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs(append([]string{"runs"}, args...))
	err := root.Execute()
	return out.String(), err
}

func TestGroup(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"help"}, {"--help"}} {
		if out, err := run(args...); err != nil || !strings.Contains(out, "Work with runs") {
			t.Errorf("runs %q: %v, %q; want its help", args, err, out)
		}
	}
	if _, err := run("list"); err != nil {
		t.Errorf("runs list: %v", err)
	}
	_, err := run("get", "x")
	if err == nil || err.Error() != `unknown command "get" for "tool runs"` {
		t.Errorf("runs get x: %v; want an unknown command", err)
	}
	_, err = run("lsit")
	if err == nil || !strings.Contains(err.Error(), "Did you mean this?\n\tlist") {
		t.Errorf("runs lsit: %v; want list suggested", err)
	}
}
