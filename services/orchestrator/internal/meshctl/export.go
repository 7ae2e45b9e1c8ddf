package meshctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
it holds files too large for a patch (over 4 MiB). A file is written
whole or not at all, keeping the mode of the one it replaces; -o - (or a
device, a pipe) is written as the content comes, and a failure part way
exits 1.`,
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
				// Absolute: the command runs in the clone, not here.
				abs, absErr := filepath.Abs(output)
				if absErr != nil {
					abs = output
				}
				_, err = fmt.Fprintf(cmd.ErrOrStderr(), "take it in a clone of the source with: git pull %s meshwork\n", shellQuote(abs))
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
// removed otherwise. The file keeps the mode of the one it replaces, and a
// new one gets the umask's. A symbolic link to a file is followed: the file
// is replaced, the link kept. A path that is not a regular file (a device
// such as /dev/stdout, a pipe) is written through, as the content comes.
func writeWhole(path string, write func(io.Writer) error) (err error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if path, err = filepath.EvalSymlinks(path); err != nil {
			return err
		}
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case err != nil:
		fi = nil // a new file: createBeside's mode
	}
	tmp, err := createBeside(path)
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
	if fi != nil {
		if err = tmp.Chmod(fi.Mode().Perm()); err != nil {
			return err
		}
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// createBeside creates a new file in path's directory, hidden, with the
// umask's mode (os.CreateTemp's is 0600).
func createBeside(path string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.FormatUint(rand.Uint64(), 36))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, fmt.Errorf("no free temporary name beside %s", path)
}

// shellQuote is s as a POSIX shell word, for a command to copy: as it is
// when it holds nothing a shell reads specially, else in single quotes.
// (A shell syntax package would be a dependency of meshctl for one line.)
func shellQuote(s string) string {
	plain := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+,:@%=", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !plain(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
