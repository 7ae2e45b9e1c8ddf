// Package cli is mesh-exec's command line: the cobra command tree main runs.
package cli

import (
	"log/slog"
	"os"

	"github.com/meshwork/meshwork/pkg/settings"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/healthprobe"
	"github.com/meshwork/meshwork/pkg/proctree"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/agenthook"
)

// defaultHealthURL is /healthz of `serve --transport http` on its default
// address, what the image's health check probes.
const defaultHealthURL = "http://127.0.0.1:8081/healthz"

// NewRoot builds the mesh-exec command tree.
func NewRoot() *cobra.Command {
	// JSON on stderr (stdout is the MCP stream over stdio), with the trace
	// and span ids of each record's context.
	logger := telemetry.NewLogger(os.Stderr, slog.LevelInfo)
	root := &cobra.Command{
		Use:   "mesh-exec",
		Short: "MCP server that runs coding-agent CLIs with session resume (tool mesh_execute)",
		Long: `mesh-exec serves one MCP tool, mesh_execute, which runs a coding-agent CLI
(claude, codex, opencode, gemini, or a configured command) on a repository under
the workspace root and resumes the agent's session across calls.

Every flag can also be set in the environment as MESH_EXEC_<FLAG>, with dashes
as underscores (--workspace-root: MESH_EXEC_WORKSPACE_ROOT). Precedence:
flag > environment > default.`,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(buildinfo.Command("mesh-exec"), newServeCommand(logger), healthprobe.Command(defaultHealthURL), &cobra.Command{
		Use:   "hook",
		Short: "Claude Code hook: check the agent's tool call against the worker's constraints (run by the agent CLI)",
		Long: `hook is what the agent CLI runs for each hook event when mesh-exec serve has a
--gate-policy: it reads the event as JSON on stdin and, for PreToolUse, refuses a
tool call that breaks the worker's constraints with Claude Code's deny decision.
Any error exits 2, which blocks the tool call.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if code := agenthook.Run(cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), os.Getenv); code != 0 {
				os.Exit(code)
			}
			return nil
		},
	}, &cobra.Command{
		Use:   proctree.IdleCommand,
		Short: "Wait until stopped: the agent worker container's main process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// PID 1: non-dumpable, so agents cannot write the container's
			// log through /proc/1/fd; it reaps and ends orphans.
			return proctree.Idle(cmd.Context())
		},
	})
	return root
}

// layers is how mesh-exec's flags take their values: flag >
// MESH_EXEC_<FLAG> > default (package settings).
var layers = settings.Layers{Prefix: "MESH_EXEC_"}
