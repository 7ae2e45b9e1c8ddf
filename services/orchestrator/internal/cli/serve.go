package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshwork/meshwork/migrations"
	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/mcphttp"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/console"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/marketplace"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mesh"
	"github.com/meshwork/meshwork/services/orchestrator/internal/httpapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/journeyview"
	"github.com/meshwork/meshwork/services/orchestrator/internal/mcptools"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/pipelines"
)

// serveConfig is `orchestrator serve`'s configuration, bound to its flags.
type serveConfig struct {
	// Addr is the HTTP listen address. Defaults to :8090.
	Addr string
	// Pipelines is a directory of pipeline files. Defaults to the built-in
	// catalog.
	Pipelines string
	// MeshURL is mesh-exec's MCP URL, for roles via mesh; its token is
	// MESH_EXEC_TOKEN. Defaults to none (such roles fail their nodes).
	MeshURL string
	// MarketplaceURL is the marketplace's MCP URL, for roles via
	// marketplace; the token is MARKETPLACE_TOKEN. Defaults to none.
	MarketplaceURL string
	// ReplicaID names this replica; the engine adds a random suffix.
	// Defaults to hostname-pid.
	ReplicaID string
	// LeaseTTL is how long a dead replica's runs wait for a takeover.
	// Defaults to 15s.
	LeaseTTL time.Duration
	// MaxWorkers bounds the nodes worked at once. Defaults to 50.
	MaxWorkers int
	// APIOnly serves the API without working any node. Defaults to false.
	APIOnly bool
	// Admins are the callers that see and act on every caller's runs.
	// Defaults to none: each caller sees the runs it started.
	Admins []string
	// Migrate applies pending migrations at start. Defaults to true.
	Migrate bool
	// TokensFile holds bearer tokens, besides ORCHESTRATOR_TOKENS.
	// Defaults to none.
	TokensFile string
	// ShutdownTimeout bounds how long running nodes are waited for on
	// SIGTERM before they are cancelled (and taken over by another replica
	// or retried). Defaults to 30s.
	ShutdownTimeout time.Duration
	// Console serves the web console at /. Defaults to true.
	Console bool
	// TraceURL links a run's page to its trace ("{trace_id}" replaced).
	// Defaults to none.
	TraceURL string
	// ConsoleSecureCookies marks the console's cookies Secure, for a
	// console that a proxy serves over TLS. Defaults to false.
	ConsoleSecureCookies bool
}

// bindFlags defines serve's flags on fs, bound to c, with their defaults.
func (c *serveConfig) bindFlags(fs *pflag.FlagSet) {
	fs.String("config", "", "YAML config file whose keys are the flag names (env ORCHESTRATOR_CONFIG)")
	fs.StringVar(&c.Addr, "addr", ":8090", "HTTP listen address")
	fs.StringVar(&c.Pipelines, "pipelines", "", "directory of pipeline YAML files (default: the built-in catalog)")
	fs.StringVar(&c.MeshURL, "mesh-url", "", "mesh-exec's MCP URL for roles via mesh, e.g. http://mesh-exec:8081/mcp (token: MESH_EXEC_TOKEN)")
	fs.StringVar(&c.MarketplaceURL, "marketplace-url", "", "the marketplace's MCP URL, for roles via marketplace and the console's journeys, e.g. http://marketplace:8080/mcp (token: MARKETPLACE_TOKEN; for the console its caller must be one of the marketplace's delegates)")
	fs.StringVar(&c.ReplicaID, "replica-id", "", "this replica's name in leases and attempts, to which a random suffix is added (default: hostname-pid)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 15*time.Second, "how long a run's lease lasts without renewal; a dead replica's runs are taken over after it")
	fs.IntVar(&c.MaxWorkers, "max-workers", 50, "most nodes this replica works at once")
	fs.BoolVar(&c.APIOnly, "api-only", false, "serve the API but work no nodes (other replicas work them)")
	fs.BoolVar(&c.Migrate, "migrate", true, "apply pending database migrations at start")
	fs.BoolVar(&c.Console, "console", true, "serve the web console at / (sign in with a token)")
	fs.BoolVar(&c.ConsoleSecureCookies, "console-secure-cookies", false, "mark the console's cookies Secure: set it when a proxy serves the console over https (the orchestrator serves plain http)")
	fs.StringVar(&c.TraceURL, "trace-url", "", `link from a run's console page to its trace, "{trace_id}" replaced (e.g. a Grafana explore URL)`)
	fs.StringSliceVar(&c.Admins, "admins", nil, "callers that see and act on every caller's runs (comma-separated); any other caller sees only the runs it started")
	fs.StringVar(&c.TokensFile, "tokens-file", "", `bearer tokens file, one "caller token" or "caller=token" per line (besides ORCHESTRATOR_TOKENS)`)
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long running nodes are waited for before they are cancelled")
}

// serviceName is the orchestrator's OpenTelemetry service.name (unless
// OTEL_SERVICE_NAME says otherwise).
const serviceName = "meshwork-orchestrator"

const serveHelp = `serve runs the orchestrator: the engine that works pipeline runs (River jobs
in Postgres, shared by every replica) and the HTTP API beside it:

  /v1/...            REST API (OpenAPI at /v1/openapi.json), bearer token required
  /mcp               the same as MCP tools (streamable HTTP), bearer token required
  /healthz /readyz   liveness, readiness (the database answers)
  /metrics           Prometheus metrics

Configuration precedence: flag > environment > --config file > default. Every
flag has an environment variable, ORCHESTRATOR_<FLAG> (--lease-ttl is
ORCHESTRATOR_LEASE_TTL; --config is ORCHESTRATOR_CONFIG); the --config file is
YAML whose keys are the flag names (lease_ttl: 30s).

Secrets come from the environment only:
  DATABASE_URL         Postgres, required; pool_max_conns in it defaults to
                       --max-workers + 10
  ORCHESTRATOR_TOKENS  the API's bearer tokens, "caller=token,caller2=token2"
                       (or --tokens-file); at least one, 16+ characters each
  MESH_EXEC_TOKEN      mesh-exec's bearer token, with --mesh-url
  MARKETPLACE_TOKEN    the marketplace's bearer token, with --marketplace-url

Telemetry: traces and metrics go over OTLP (http/protobuf) when
OTEL_EXPORTER_OTLP_ENDPOINT is set, e.g. http://lgtm:4318; the other standard
OTEL_* variables apply (OTEL_SERVICE_NAME defaults to meshwork-orchestrator).
A run is one trace: GET /v1/runs/{id} shows its trace_id.

On SIGTERM or SIGINT it stops serving HTTP, then stops the engine, waiting up
to --shutdown-timeout for running nodes.`

func newServeCommand(logger *slog.Logger, getenv func(string) string) *cobra.Command {
	var cfg serveConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the engine and serve the HTTP API and MCP tools",
		Long:  serveHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolveSettings(cmd.Flags(), getenv); err != nil {
				return err
			}
			return serve(cmd.Context(), cfg, getenv, logger)
		},
	}
	cfg.bindFlags(cmd.Flags())
	layers.Annotate(cmd.Flags())
	return cmd
}

// serve runs until ctx ends, then shuts down in order.
func serve(ctx context.Context, cfg serveConfig, getenv func(string) string, logger *slog.Logger) error {
	if cfg.MaxWorkers < 1 || cfg.LeaseTTL < time.Second || cfg.ShutdownTimeout <= 0 {
		return fmt.Errorf("max-workers must be at least 1, lease-ttl at least 1s and shutdown-timeout positive (have %d, %s, %s)", cfg.MaxWorkers, cfg.LeaseTTL, cfg.ShutdownTimeout)
	}
	tokens, err := bearer.Load("ORCHESTRATOR_TOKENS", getenv("ORCHESTRATOR_TOKENS"), cfg.TokensFile)
	if err != nil {
		return err
	}
	if tokens.Len() == 0 {
		return errors.New("the API needs at least one bearer token: set ORCHESTRATOR_TOKENS=caller=token (16+ characters) or --tokens-file")
	}
	catalog, err := loadCatalog(cfg.Pipelines)
	if err != nil {
		return err
	}
	// One registry serves /metrics and is exported over OTLP beside the
	// traces. Telemetry starts before the database, whose pool traces its
	// queries, and is flushed once the rest has stopped, but before the
	// pool closes: the last export still reads the runs from the database
	// (orchestrator_runs_*).
	reg := telemetry.NewRegistry()
	stopTelemetry, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: serviceName, Version: buildinfo.Version, Metrics: reg, Logger: logger})
	if err != nil {
		return err
	}
	defer stopTelemetry() // when the database does not open
	// Sized to the engine's workers (engine.PoolSize); pool_max_conns in
	// DATABASE_URL overrides it.
	pool, err := openDatabase(ctx, getenv, cfg.Migrate, engine.PoolSize(cfg.MaxWorkers), logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	defer stopTelemetry() // before pool.Close

	executors, closeExecutors, err := newExecutors(cfg, getenv, logger)
	if err != nil {
		return err
	}
	defer closeExecutors()
	nodeMetrics := engine.NewMetrics(reg)
	nodeMetrics.Prepare(catalog)
	eng, err := engine.New(engine.Config{
		Pool: pool, Catalog: catalog, Executors: executors, ReplicaID: cfg.ReplicaID,
		LeaseTTL: cfg.LeaseTTL, MaxWorkers: cfg.MaxWorkers, WorkDisabled: cfg.APIOnly, Logger: logger,
		OnCommit: nodeMetrics.Observe,
	})
	if err != nil {
		return err
	}
	// The engine outlives ctx: it is stopped below, after the HTTP server.
	if err := eng.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	stopEngine := func() error {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if err := eng.Stop(stopCtx); err != nil {
			return fmt.Errorf("stopping the engine: %w", err)
		}
		return nil
	}

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return errors.Join(fmt.Errorf("listening on %s: %w", cfg.Addr, err), stopEngine())
	}
	reg.MustRegister(httpapi.NewRunsCollector(pool))
	metrics := httpapi.NewMetrics(reg)
	tools, err := mcptools.New(mcptools.Config{
		Engine: eng, Caller: meshapi.TokenCaller, Logger: logger, Admins: cfg.Admins,
		OnRunStarted: func(r api.Run) { metrics.RunStarted(r.Pipeline, "mcp") },
	})
	if err != nil {
		_ = ln.Close()
		return errors.Join(err, stopEngine())
	}
	var web http.Handler
	if cfg.Console {
		cc := console.Config{Engine: eng, Tokens: tokens, Admins: cfg.Admins, TraceURL: cfg.TraceURL, Logger: logger, SecureCookies: cfg.ConsoleSecureCookies}
		if cfg.MarketplaceURL != "" {
			// newExecutors checked the token. The console's journeys are
			// asked for on the signed-in caller's behalf: the marketplace
			// must list the orchestrator's caller in its delegates.
			jv, err := journeyview.New(journeyview.Config{Endpoint: cfg.MarketplaceURL, Token: getenv("MARKETPLACE_TOKEN"), Logger: logger.With(slog.String("client", "console"))})
			if err != nil {
				_ = ln.Close()
				return errors.Join(err, stopEngine())
			}
			defer func() { _ = jv.Close() }()
			cc.Journeys = jv
		}
		if web, err = console.New(cc); err != nil {
			_ = ln.Close()
			return errors.Join(err, stopEngine())
		}
	}
	var sessions func(*http.Request) (string, bool)
	if web != nil {
		sessions = console.SessionCaller(tokens, nil)
	}
	api, err := httpapi.New(httpapi.Config{
		Console: web, SessionCaller: sessions,
		Engine: eng, Tokens: tokens, Metrics: metrics, Gatherer: reg, Logger: logger, Admins: cfg.Admins,
		MCP:        mcptools.HTTPHandler(tools, logger),
		Ready:      pool.Ping,
		ServerName: telemetry.ServerName("orchestrator", ln.Addr()),
	})
	if err != nil {
		_ = ln.Close()
		return errors.Join(err, stopEngine())
	}
	logger.InfoContext(ctx, "serving", slog.String("addr", ln.Addr().String()), slog.String("replica", eng.ReplicaID()),
		slog.Bool("api_only", cfg.APIOnly), slog.Int("pipelines", len(catalog.Pipelines())))
	// The event streams end as the shutdown starts (their clients
	// reconnect with Last-Event-ID); the other requests are waited for.
	serveErr := mcphttp.Serve(ctx, ln, api, logger, func() { logger.InfoContext(ctx, "shutting down") }, api.CloseStreams)
	if serveErr != nil {
		serveErr = fmt.Errorf("serving HTTP: %w", serveErr)
	}
	err = errors.Join(serveErr, stopEngine())
	if err == nil {
		logger.InfoContext(ctx, "stopped")
	}
	return err
}

// loadCatalog loads the pipelines of dir, or the built-in ones.
func loadCatalog(dir string) (*pipeline.Catalog, error) {
	if dir == "" {
		cat, err := pipelines.Load()
		if err != nil {
			return nil, fmt.Errorf("loading the built-in pipelines:\n%w", err)
		}
		return cat, nil
	}
	cat, err := pipeline.LoadDir(os.DirFS(dir))
	if err != nil {
		return nil, fmt.Errorf("loading the pipelines of %s:\n%w", dir, err)
	}
	if len(cat.Pipelines()) == 0 {
		return nil, fmt.Errorf("%s holds no pipelines (*.yaml)", dir)
	}
	return cat, nil
}

// openDatabase connects to DATABASE_URL, migrating it first if asked. The
// pool has maxConns connections at most unless DATABASE_URL sets
// pool_max_conns; 0 keeps pgx's default.
func openDatabase(ctx context.Context, getenv func(string) string, migrate bool, maxConns int32, logger *slog.Logger) (*pgxpool.Pool, error) {
	dsn := getenv("DATABASE_URL")
	if dsn == "" {
		return nil, errors.New("no database: set DATABASE_URL, e.g. postgres://meshwork:secret@localhost:5432/meshwork")
	}
	if migrate {
		db, err := migrations.Open(dsn)
		if err != nil {
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		applied, err := migrations.Apply(ctx, db, logger)
		_ = db.Close()
		if err != nil {
			return nil, err
		}
		for _, a := range applied {
			logger.InfoContext(ctx, "migration applied", slog.Int64("version", a.Version), slog.String("name", a.Name))
		}
	}
	pc, err := poolConfig(dsn, maxConns)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	return pool, nil
}

// poolConfig parses dsn, with at most maxConns connections (when not 0)
// unless dsn sets pool_max_conns itself.
//
// Its queries are traced (otelpgx), as children of the span in their
// context: a node's and a request's queries show in their trace. Queries
// with no span around them, River's polling for jobs, make no span.
func poolConfig(dsn string, maxConns int32) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The error may quote the DSN, password included.
		return nil, errors.New("DATABASE_URL is not a valid connection string")
	}
	if maxConns > 0 && !setsPoolMaxConns(dsn) {
		pc.MaxConns = maxConns
	}
	// No span per connection acquired: the pool is sized to the workers,
	// and a span for each would double every query's.
	pc.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithDisableAcquireTracer())
	return pc, nil
}

// poolMaxConnsKey finds pool_max_conns in a keyword/value connection string.
var poolMaxConnsKey = regexp.MustCompile(`(^|\s)pool_max_conns\s*=`)

// setsPoolMaxConns tells whether a connection string (a URL or keyword/value
// pairs) sets pool_max_conns.
func setsPoolMaxConns(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		return err == nil && u.Query().Has("pool_max_conns")
	}
	return poolMaxConnsKey.MatchString(dsn)
}

// newExecutors builds the executors the URLs name; closeAll closes them.
func newExecutors(cfg serveConfig, getenv func(string) string, logger *slog.Logger) (_ map[pipeline.Via]executor.Executor, closeAll func(), _ error) {
	executors := map[pipeline.Via]executor.Executor{}
	var closers []io.Closer
	closeAll = func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	fail := func(err error) (map[pipeline.Via]executor.Executor, func(), error) {
		closeAll()
		return nil, func() {}, err
	}
	if cfg.MeshURL != "" {
		token := getenv("MESH_EXEC_TOKEN")
		if token == "" {
			return fail(errors.New("--mesh-url needs mesh-exec's bearer token in MESH_EXEC_TOKEN"))
		}
		ex, err := mesh.New(mesh.Config{Endpoint: cfg.MeshURL, Token: token, Logger: logger.With(slog.String("executor", "mesh"))})
		if err != nil {
			return fail(err)
		}
		executors[pipeline.ViaMesh] = ex
		closers = append(closers, ex)
	}
	if cfg.MarketplaceURL != "" {
		token := getenv("MARKETPLACE_TOKEN")
		if token == "" {
			return fail(errors.New("--marketplace-url needs the orchestrator's marketplace bearer token in MARKETPLACE_TOKEN"))
		}
		ex, err := marketplace.New(marketplace.Config{Endpoint: cfg.MarketplaceURL, Token: token, Logger: logger.With(slog.String("executor", "marketplace"))})
		if err != nil {
			return fail(err)
		}
		executors[pipeline.ViaMarketplace] = ex
		closers = append(closers, ex)
	}
	if !cfg.APIOnly && len(executors) == 0 {
		logger.Warn("no executor configured (--mesh-url, --marketplace-url): agent nodes will fail")
	}
	return executors, closeAll, nil
}
