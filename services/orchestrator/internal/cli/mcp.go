package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/mcptools"
)

// mcpConfig is `orchestrator mcp`'s configuration, bound to its flags.
type mcpConfig struct {
	// Transport is the MCP transport; only stdio (HTTP is served by serve
	// at /mcp). Defaults to stdio.
	Transport string
	// Pipelines is a directory of pipeline files; it must match the
	// replicas' for forks and resumes. Defaults to the built-in catalog.
	Pipelines string
	// Caller is recorded as the caller of every run and decision. Defaults
	// to "local".
	Caller string
}

const mcpHelp = `mcp serves the orchestrator's MCP tools (run_pipeline, get_run, list_runs,
list_checkpoints, fork_run, resume_run, cancel_run, list_pipelines) to one
client on stdin/stdout, against the database in DATABASE_URL.

It works no nodes itself: runs it starts are worked by the replicas running
'orchestrator serve' on the same database. The schema must be migrated
('orchestrator migrate', or serve's --migrate).

Configuration precedence: flag > environment (ORCHESTRATOR_<FLAG>) > --config
file (YAML, keys as the flag names) > default.`

func newMCPCommand(logger *slog.Logger, getenv func(string) string) *cobra.Command {
	var cfg mcpConfig
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the orchestrator's MCP tools over stdio",
		Long:  mcpHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolveSettings(cmd.Flags(), getenv); err != nil {
				return err
			}
			return serveMCP(cmd.Context(), cfg, getenv, cmd.InOrStdin(), cmd.OutOrStdout(), logger)
		},
	}
	fs := cmd.Flags()
	fs.String("config", "", "YAML config file whose keys are the flag names (env ORCHESTRATOR_CONFIG)")
	fs.StringVar(&cfg.Transport, "transport", "stdio", "MCP transport: stdio (for HTTP, use serve: /mcp)")
	fs.StringVar(&cfg.Pipelines, "pipelines", "", "directory of pipeline YAML files (default: the built-in catalog)")
	fs.StringVar(&cfg.Caller, "caller", "local", "caller recorded with the runs started and decisions made")
	layers.Annotate(fs)
	return cmd
}

// serveMCP serves the tools on in and out until the client leaves or ctx
// ends.
func serveMCP(ctx context.Context, cfg mcpConfig, getenv func(string) string, in io.Reader, out io.Writer, logger *slog.Logger) error {
	if cfg.Transport != "stdio" {
		return fmt.Errorf("transport %q: only stdio; MCP over HTTP is served by 'orchestrator serve' at /mcp", cfg.Transport)
	}
	catalog, err := loadCatalog(cfg.Pipelines)
	if err != nil {
		return err
	}
	// Traces only (stdout is the MCP stream; OTLP goes over HTTP): a run
	// started here keeps the trace of the tool call that started it.
	stopTelemetry, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: serviceName, Version: buildinfo.Version, Logger: logger})
	if err != nil {
		return err
	}
	defer stopTelemetry()
	pool, err := openDatabase(ctx, getenv, false, 0, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	eng, err := engine.New(engine.Config{Pool: pool, Catalog: catalog, WorkDisabled: true, Logger: logger})
	if err != nil {
		return err
	}
	srv, err := mcptools.New(mcptools.Config{Engine: eng, Caller: meshapi.FixedCaller(cfg.Caller), Logger: logger})
	if err != nil {
		return err
	}
	logger.InfoContext(ctx, "serving MCP on stdio", slog.String("caller", cfg.Caller))
	r, ok := in.(io.ReadCloser)
	if !ok {
		r = io.NopCloser(in)
	}
	w, ok := out.(io.WriteCloser)
	if !ok {
		w = nopWriteCloser{out}
	}
	err = srv.Run(ctx, &mcp.IOTransport{Reader: r, Writer: w})
	if errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil
	}
	return err
}

// nopWriteCloser is a Writer that needs no closing.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
