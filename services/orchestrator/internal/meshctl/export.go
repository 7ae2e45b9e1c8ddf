package meshctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
)

func (a *app) runsExport() *cobra.Command {
	var node, format, output string
	cmd := &cobra.Command{
		Use:   "export RUN_ID -o FILE",
		Short: "Save the workspace that holds a node's change, whole (files too large for its patch included): a git bundle, or --format tar",
		Long: `Save the workspace that holds a node's change (default: the pipeline's patch
node's) as a git bundle of one commit on the source's commit, which
"git pull FILE meshwork" takes in a clone of the source, or as a tar of its
files (--format tar, also for a source that is not git). Unlike the patch,
it holds files too large for a patch (over 4 MiB). The file is written
whole or not at all; -o - writes to standard output as it comes (a
failure part way exits 1).`,
		Args: exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			if output == "" {
				return errors.New("-o is required: the file to write (- for standard output)")
			}
			if fi, err := os.Stat(output); err == nil && fi.IsDir() {
				return fmt.Errorf("-o %s is a directory; name the file to write", output)
			}
			if format != "bundle" && format != "tar" {
				return fmt.Errorf("--format %q is not one of bundle, tar", format)
			}
			if node == "" {
				v, err := c.GetRun(ctx, args[0])
				if err != nil {
					return err
				}
				if v.PatchNode == "" {
					return fmt.Errorf("run %s: pipeline %s makes no patch (no node has a source); name a node with --node", v.ID, v.Pipeline)
				}
				node = v.PatchNode
			}
			var ws apiclient.Workspace
			var err error
			if output == "-" {
				out := a.rawOut
				if out == nil {
					out = cmd.OutOrStdout()
				}
				ws, err = c.ExportWorkspace(ctx, args[0], node, format, out)
			} else {
				err = writeWhole(output, func(w io.Writer) error {
					ws, err = c.ExportWorkspace(ctx, args[0], node, format, w)
					return err
				})
			}
			if err != nil {
				return err
			}
			what := fmt.Sprintf("a tar of the workspace of node %s", node)
			if format == "bundle" {
				what = fmt.Sprintf("a git bundle of commit %s, the change of node %s", ws.Commit, node)
			}
			_, err = fmt.Fprintf(cmd.ErrOrStderr(), "run %s: wrote %s (%d bytes, SHA-256 %s) to %s\n", args[0], what, ws.Bytes, ws.SHA256, output)
			if err == nil && format == "bundle" && output != "-" {
				_, err = fmt.Fprintf(cmd.ErrOrStderr(), "take it in a clone of the source with: git pull %s meshwork\n", output)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "", "the file to write (- for standard output)")
	f.StringVar(&node, "node", "", "the node whose workspace to save (default: the pipeline's patch node)")
	f.StringVar(&format, "format", "bundle", "bundle (a git source only) or tar")
	return cmd
}

// writeWhole writes path through write, all of it or nothing: into a
// temporary file beside it, renamed over path once write succeeded, and
// removed otherwise.
func writeWhole(path string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
