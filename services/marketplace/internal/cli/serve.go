package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/action"
	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/mcphttp"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/egress"
	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
	"github.com/meshwork/meshwork/services/marketplace/internal/mcpserver"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker"
	"github.com/meshwork/meshwork/workers"
)

func newServeCommand(logger *slog.Logger) *cobra.Command {
	cfg := defaultServeConfig()
	var configFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the marketplace over MCP (stdio or streamable HTTP)",
		Long: `serve runs the marketplace's MCP server.

  --transport stdio        one client on stdin/stdout; it owns the journeys it creates
  --transport http         streamable HTTP at /mcp (bearer token required), with
                           /healthz, /readyz and /metrics beside it

Configuration precedence: flag > environment (MESHWORK_*) > --config file
(YAML, keys as in the flag names with underscores) > default. The database
comes from DATABASE_URL and tokens from MESHWORK_TOKENS ("caller=token,...")
or --tokens-file; both only from the environment or files, never flags.
Tokens are stored in the database only as SHA-256 hashes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			file := configFile
			if file == "" {
				file = os.Getenv(layers.EnvName("config"))
			}
			if err := cfg.resolve(cmd.Flags(), file, os.Getenv); err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, logger)
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "YAML config file, keys as the flag names (env MESHWORK_CONFIG)")
	cfg.bindFlags(cmd.Flags())
	return cmd
}

func serve(ctx context.Context, cfg serveConfig, logger *slog.Logger) error {
	// One registry serves /metrics and, through the bridge, OTLP. Telemetry
	// is set up first so that the database tracer and the HTTP handler find
	// the providers, and flushed once the server has stopped.
	reg := telemetry.NewRegistry()
	flushTelemetry, err := telemetry.Setup(ctx, telemetry.Config{
		ServiceName: "meshwork-marketplace", Version: buildinfo.Version, Metrics: reg, Logger: logger,
	})
	if err != nil {
		return fmt.Errorf("setting up telemetry: %w", err)
	}
	defer flushTelemetry()

	catalogFS := workers.FS()
	if cfg.Catalog != "" {
		catalogFS = os.DirFS(cfg.Catalog)
	}
	catalog, err := workerdef.Load(catalogFS)
	if err != nil {
		return fmt.Errorf("loading the worker catalog:\n%w", err)
	}
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return errors.New("no database: set DATABASE_URL, e.g. postgres://meshwork:secret@localhost:5432/meshwork")
	}
	// The errors do not wrap pgx's: they may quote the DSN, password included.
	poolCfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return errors.New("parsing DATABASE_URL: invalid connection string")
	}
	// Queries made for a request are spans of its trace; queries outside
	// any trace (pool upkeep, the idle stopper) make no span.
	poolCfg.ConnConfig.Tracer = otelpgx.NewTracer()
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return errors.New("parsing DATABASE_URL: invalid pool settings")
	}
	defer pool.Close()
	// Flushed before the pool closes: the last export still reads the
	// live journeys from the database.
	defer flushTelemetry()
	if err := otelpgx.RecordStats(pool); err != nil {
		logger.WarnContext(ctx, "database pool metrics are off", slog.Any("error", err))
	}
	st := store.New(pool).WithLockConns(cfg.MaxRunningActions)
	defer st.Close()
	if err := st.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	labels, err := parseLabels(cfg.Labels)
	if err != nil {
		return err
	}
	poolSizes, err := parsePoolSizes(cfg.PoolSizes)
	if err != nil {
		return err
	}
	runtimes, err := newRuntimes(ctx, cfg, logger)
	if err != nil {
		return err
	}
	sources, err := cfg.sourcePolicy()
	if err != nil {
		return err
	}
	baseDir := cfg.BaseDir
	if baseDir == "" {
		baseDir = filepath.Join(os.TempDir(), "meshwork-bases")
	}
	baseStore, err := bases.NewStore(baseDir)
	if err != nil {
		return err
	}
	jcfg := journeys.Config{
		Catalog: catalog, Store: st, Runtimes: runtimes, Labels: labels,
		ArchiveDir: cfg.ArchiveDir, Logger: logger, Metrics: reg,
		AgentEnv: agentCredentials(os.Getenv), NestedMCPURL: cfg.NestedMCPURL,
		Bases: baseStore, Sources: sources,
		MaxJourneysPerCaller: cfg.MaxJourneysPerCaller, MaxJourneys: cfg.MaxJourneys,
		EgressNetwork: cfg.EgressNetwork, EgressProxyHost: cfg.EgressProxyHost, EgressNoProxy: cfg.EgressNoProxy,
		PoolSizes: poolSizes, MaxPoolMembers: cfg.MaxPoolMembers, ChannelIdle: cfg.ChannelIdle,
	}
	// The proxy audits through the manager, made below; a connection
	// before then (from no worker: none exists yet) is refused unaudited.
	var auditor atomic.Pointer[journeys.Manager]
	if cfg.EgressJoin != "" {
		if err := joinEgressNetwork(ctx, st, runtimes, cfg.EgressNetwork, cfg.EgressJoin, labels); err != nil {
			return err
		}
	}
	if cfg.EgressProxyAddr != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.EgressProxyAddr)
		if err != nil {
			return fmt.Errorf("egress proxy: %w", err)
		}
		jcfg.EgressProxyPort = ln.Addr().(*net.TCPAddr).Port
		jcfg.Egress = egress.New(func(r egress.Record) {
			if m := auditor.Load(); m != nil {
				m.AuditEgress(r)
			}
		}, logger)
		proxySrv := &http.Server{Handler: jcfg.Egress, ReadHeaderTimeout: 30 * time.Second}
		go func() {
			if err := proxySrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.ErrorContext(ctx, "the egress proxy stopped", slog.Any("error", err))
			}
		}()
		defer func() { _ = proxySrv.Close() }()
		logger.InfoContext(ctx, "egress proxy listening", slog.String("proxy_addr", ln.Addr().String()), slog.String("network", cfg.EgressNetwork))
	}
	mgr, err := journeys.New(jcfg)
	if err != nil {
		return err
	}
	auditor.Store(mgr)
	defer mgr.Close()
	if err := mgr.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconciling workers: %w", err)
	}
	go mgr.RunIdleStopper(ctx, cfg.IdleCheck)
	poolsCtx, stopPools := context.WithCancel(ctx)
	poolsDone := make(chan struct{})
	go func() {
		defer close(poolsDone)
		mgr.RunPools(poolsCtx)
	}()
	// A marketplace that stops takes the warm pools' members with it (a
	// replica still running refills them): stopping the stack leaves no
	// worker that no journey holds. Runs before mgr.Close, once the
	// refiller is done, however serve returns.
	defer func() {
		stopPools()
		<-poolsDone
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolDrainTimeout)
		defer cancel()
		if n, err := mgr.DrainPools(dctx); err != nil || n > 0 {
			logger.InfoContext(dctx, "drained the warm pools", slog.Int("removed", n), slog.Any("error", err))
		}
	}()

	if cfg.Transport == "stdio" {
		warnCredentialCallers(ctx, logger, sources, func(c string) bool { return c == cfg.Caller })
		logger.InfoContext(ctx, "serving MCP on stdio", slog.String("caller", cfg.Caller))
		srv := mcpserver.New(mgr, catalog, meshapi.Delegating(meshapi.FixedCaller(cfg.Caller), nil), logger)
		// Room for the largest action, JSON-escaped inside the request.
		err := srv.Run(ctx, &mcp.IOTransport{Reader: os.Stdin, Writer: os.Stdout, MaxLineLength: 8 * action.MaxSize})
		if errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed) {
			return nil
		}
		return err
	}

	tokens, err := bearer.Load("MESHWORK_TOKENS", os.Getenv("MESHWORK_TOKENS"), cfg.TokensFile)
	if err != nil {
		return err
	}
	if tokens.Len() == 0 {
		return errors.New("HTTP needs at least one bearer token: set MESHWORK_TOKENS=caller=token (16+ characters) or --tokens-file")
	}
	keep := make([][]byte, 0, tokens.Len())
	for caller, hash := range tokens.All() {
		if err := st.PutToken(ctx, caller, hash, nil); err != nil {
			return err
		}
		keep = append(keep, hash)
	}
	if err := st.RevokeConfiguredExcept(ctx, keep); err != nil {
		return err
	}
	if cfg.Delegates == "" { // a delegate may act for a caller of any name
		warnCredentialCallers(ctx, logger, sources, tokens.Has)
	}

	srv := mcpserver.New(mgr, catalog, meshapi.Delegating(meshapi.TokenCaller, splitList(cfg.Delegates)), logger)
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return err
	}
	handler := mcpserver.NewHTTPHandler(srv, st, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), telemetry.ServerName("marketplace", ln.Addr()))
	logger.InfoContext(ctx, "serving MCP over HTTP", slog.String("addr", ln.Addr().String()))
	return mcphttp.Serve(ctx, ln, handler, logger)
}

// warnCredentialCallers logs each caller that the source credentials name
// and that cannot call (known says who can): a typo there would otherwise
// leave the caller it meant fetching without credentials, unsaid.
func warnCredentialCallers(ctx context.Context, logger *slog.Logger, sources source.Policy, known func(string) bool) {
	for _, c := range sources.CredentialCallers() {
		if !known(c) {
			logger.WarnContext(ctx, "source-credentials-file names a caller that cannot call this marketplace: its credentials there serve no spawn", slog.String("caller", c))
		}
	}
}

// poolDrainTimeout bounds the removal of the pools' members at stop, within
// the stack's grace period (20 s, after up to 10 s of HTTP shutdown); what
// is left is reconciled by the next marketplace to start.
const poolDrainTimeout = 8 * time.Second

// agentCredentials are the agent CLIs' credentials in the marketplace's
// environment, passed on to agent containers (and nowhere else).
func agentCredentials(getenv func(string) string) []string {
	var env []string
	for _, name := range []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "OPENAI_API_KEY", "CODEX_API_KEY", "GEMINI_API_KEY"} {
		if v := getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// joinEgressNetwork puts the container the marketplace runs in on the
// egress network (made if missing) under alias: the proxy's host for the
// egress workers, and the nested workers' MCP endpoint. The network is the
// marketplace's, not Compose's, so stopping the stack leaves it, and the
// live journeys' workers on it, alone.
func joinEgressNetwork(ctx context.Context, st *store.Store, runtimes map[meshtype.IsolationLevel]workerruntime.Runtime, network, alias string, labels map[string]string) error {
	d, ok := runtimes[meshtype.IsolationContainer].(*docker.Runtime)
	if !ok {
		return errors.New("--egress-join needs the Docker runtime")
	}
	// Under the network's lock: marketplaces starting at once (replicas)
	// would otherwise each create one.
	unlock, err := st.LockNetwork(ctx, network)
	if err != nil {
		return fmt.Errorf("--egress-join: %w", err)
	}
	_, err = d.EnsureInternalNetwork(ctx, network, labels)
	unlock()
	if err != nil {
		return err
	}
	self, err := os.Hostname()
	if err != nil {
		return fmt.Errorf("--egress-join: %w", err)
	}
	return d.JoinNetwork(ctx, self, network, alias)
}
