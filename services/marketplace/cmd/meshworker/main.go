// Command meshworker runs inside builtin worker containers and serves the
// file, search, exec and git actions as MCP tools over stdio, confined to
// /workspace. It is a static binary so worker images can be built FROM scratch.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/proctree"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
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
	root.AddCommand(buildinfo.Command("meshworker"), serveCommand(), catCommand(), &cobra.Command{
		Use:   proctree.IdleCommand,
		Short: "Wait until stopped: the worker container's main process",
		Long: `idle is the main process of a builtin worker container. It does nothing
until SIGTERM or SIGINT; the marketplace runs "meshworker serve" beside it
through exec sessions, so a broken session can be re-opened without
restarting the container.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// PID 1: non-dumpable, so commands cannot write the container's
			// log through /proc/1/fd; it reaps and ends orphans.
			return proctree.Idle(cmd.Context())
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

// serveCommand serves the tools over stdin and stdout until stdin closes.
// Stdout is the protocol, so logs go to stderr only.
func serveCommand() *cobra.Command {
	cfg := meshworker.Config{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the workspace tools as an MCP server over stdio",
		Long: `serve is an MCP server on stdin and stdout with the tools read, write,
list, search, delete, exec, git_status, git_diff, git_log, git_add and
git_commit, confined to --root. It exits when stdin closes. Logs (JSON) go
to stderr.

--allowed-path and --denied-path take the worker definition's
allowed_paths and denied_paths globs, one per flag. They are checked on the
path a request names and on the path it resolves to after following
symbolic links, so a link cannot reach a denied file under an allowed
name; list and search leave out what they refuse. An invalid glob is a
startup error.

exec runs commands with PATH=/usr/local/bin:/usr/bin:/bin and HOME=/tmp,
plus the Go toolchain's settings found in this environment (GOCACHE,
GOFLAGS, GOMODCACHE, GOPATH, GOPROXY, GOTMPDIR, GOTOOLCHAIN; a worker image
sets them), and nothing else of it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The commands exec runs share our uid: they must not be able
			// to trace us, read our memory or write to our stdout (the
			// protocol), nor leave processes behind.
			if err := proctree.Protect(); err != nil {
				return err
			}
			logger := telemetry.NewLogger(os.Stderr, slog.LevelInfo)
			sweeper, err := proctree.NewSweeper(logger)
			if err != nil {
				return err
			}
			cfg.Sweeper = sweeper
			cfg.ExecEnv = meshworker.ToolchainEnv(os.Environ())
			// The container has no network, so nothing is exported; Setup
			// still installs the propagator and a recording provider, so
			// the tool calls continue the marketplace's trace (from
			// params._meta) and every log line carries its trace id.
			flushTelemetry, err := telemetry.Setup(cmd.Context(), telemetry.Config{ServiceName: "meshwork-meshworker", Version: buildinfo.Version, Logger: logger})
			if err != nil {
				return err
			}
			defer flushTelemetry()
			srv, err := meshworker.NewServer(cfg, logger)
			if err != nil {
				return err
			}
			err = srv.Run(cmd.Context(), &mcp.StdioTransport{MaxLineLength: cfg.MaxLineLength()})
			if cmd.Context().Err() != nil {
				return nil //nolint:nilerr // stopped by a signal: a clean exit
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Root, "root", meshworker.DefaultRoot, "workspace directory; no path can leave it")
	f.Int64Var(&cfg.MaxFileSize, "max-file-size", meshworker.DefaultMaxFileSize, "largest file read, written, searched or diffed, in bytes")
	f.BoolVar(&cfg.Readonly, "readonly", false, "refuse write, delete, git_add and git_commit")
	f.DurationVar(&cfg.ExecTimeout, "exec-timeout", meshworker.DefaultExecTimeout, "longest a command may run (and the cap on timeout_ms)")
	f.Int64Var(&cfg.MaxOutput, "max-output", meshworker.DefaultMaxOutput, "cap on each of a command's stdout and stderr, in bytes")
	f.BoolVar(&cfg.AllowExec, "allow-exec", false, "enable the exec tool")
	f.StringArrayVar(&cfg.AllowedPaths, "allowed-path", nil, "glob a path must match, as asked and after following symbolic links (repeatable; default: every path)")
	f.Int64Var(&cfg.MaxWorkspaceBytes, "max-workspace-bytes", meshworker.DefaultMaxWorkspaceBytes, "workspace quota in bytes: writes past it are refused, a command passing it is killed (negative: no limit)")
	f.Int64Var(&cfg.MaxWorkspaceFiles, "max-workspace-files", meshworker.DefaultMaxWorkspaceFiles, "workspace quota in files and directories (negative: no limit)")
	f.StringArrayVar(&cfg.DeniedPaths, "denied-path", nil, "glob of paths refused, as asked and after following symbolic links (repeatable; default: none)")
	return cmd
}

// catCommand prints a workspace file, opened through os.Root like every
// served action: a one-shot read for debugging with `docker exec`, and the
// baseline the marketplace's read benchmark compares against.
func catCommand() *cobra.Command {
	root := "/workspace"
	cmd := &cobra.Command{
		Use:   "cat PATH",
		Short: "Print a file of the workspace (PATH relative to --root)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := os.OpenRoot(root)
			if err != nil {
				return err
			}
			defer r.Close()
			f, err := r.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(cmd.OutOrStdout(), f)
			return err
		},
	}
	cmd.Flags().StringVar(&root, "root", root, "workspace root")
	return cmd
}
