package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/mcphttp"
	"github.com/meshwork/meshwork/pkg/proctree"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/wsquota"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/agenthook"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/hookwire"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/runner"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/server"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/session"
)

type serveFlags struct {
	transport, addr, workspaceRoot, sessionDir, backend, binary    string
	model, allowedTools, appendPrompt, appendPromptFile, mcpConfig string
	mcpConfigJSON, gatePolicy                                      string
	busy, runAs, tokenFile                                         string
	command                                                        commandFlags
	maxTurns, maxTaskBytes                                         int
	maxWorkspaceBytes, maxWorkspaceFiles                           int64
	defaultTimeout, grace                                          time.Duration
}

func newServeCommand(logger *slog.Logger) *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve mesh_execute over MCP (stdio or streamable HTTP)",
		Long: `serve runs mesh-exec's MCP server.

  --transport stdio   one client on stdin/stdout; at end of input mesh-exec stops
                      its agents (whole process groups) before it exits
  --transport http    streamable HTTP at /mcp, bearer token required
                      (MESH_EXEC_TOKEN or --token-file), /healthz and
                      /metrics (Prometheus, no token) beside it

Traces and metrics go over OTLP (http/protobuf) when OTEL_EXPORTER_OTLP_ENDPOINT
is set, and nowhere otherwise; logs are JSON on stderr with trace ids.

Sessions are remembered in --session-dir (keep it on a volume): a resume runs
in the session's repository with the session's backend. A second call on a
session that is running waits for it (--busy wait, the default) or fails at
once (--busy refuse).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := layers.Resolve(cmd.Flags(), os.Getenv); err != nil {
				return err
			}
			return serve(cmd.Context(), f, logger)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.transport, "transport", "stdio", "stdio or http")
	fl.StringVar(&f.addr, "addr", ":8081", "HTTP listen address")
	fl.StringVar(&f.workspaceRoot, "workspace-root", "/workspace", "repositories must resolve inside this directory")
	fl.StringVar(&f.sessionDir, "session-dir", "", "where sessions are remembered (default <workspace-root>/.meshwork/sessions)")
	fl.StringVar(&f.backend, "backend", "claude", "agent CLI for new sessions: "+strings.Join(backendNames(), ", "))
	fl.StringVar(&f.binary, "binary", "", "path of the backend's CLI (default: its usual name on PATH)")
	fl.StringVar(&f.model, "model", "", "model passed to the agent")
	fl.StringVar(&f.allowedTools, "allowed-tools", "", "comma-separated agent tools allowed without asking")
	fl.IntVar(&f.maxTurns, "max-turns", 0, "turn limit per task (0: the CLI's default)")
	fl.StringVar(&f.appendPrompt, "append-system-prompt", "", "text appended to the agent's system prompt")
	fl.StringVar(&f.appendPromptFile, "append-system-prompt-file", "", "file whose text is appended to the agent's system prompt")
	fl.StringVar(&f.mcpConfig, "mcp-config", "", "MCP client config file given to the agent")
	fl.StringVar(&f.mcpConfigJSON, "mcp-config-json", "", "MCP client config given to the agent, as JSON (written to a private file beside the sessions)")
	fl.StringVar(&f.gatePolicy, "gate-policy", "", "the worker's policy as JSON ({\"workspace\", \"definition\"}): the claude backend's tool calls are checked against it by hooks before they run (default: not checked)")
	fl.StringVar(&f.busy, "busy", server.BusyWait, "a call on a busy session: wait or refuse")
	fl.IntVar(&f.maxTaskBytes, "max-task-bytes", 1<<20, "largest task accepted")
	fl.Int64Var(&f.maxWorkspaceBytes, "max-workspace-bytes", 0, "workspace quota in bytes: a run is refused while the workspace is over it and stopped when it passes it (0: none)")
	fl.Int64Var(&f.maxWorkspaceFiles, "max-workspace-files", 0, "workspace quota in files and directories (0: none)")
	fl.DurationVar(&f.defaultTimeout, "default-timeout", 10*time.Minute, "timeout of calls that give none")
	fl.DurationVar(&f.grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping an agent")
	fl.StringVar(&f.runAs, "run-as", "", "uid:gid agents run as when mesh-exec runs as root")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the HTTP bearer token")
	fl.StringVar(&f.command.argv, "command-argv", "", `command backend: argv template as JSON, with {task}, {session_id}, {repository}, {model}`)
	fl.StringVar(&f.command.resumeArgv, "command-resume-argv", "", "command backend: argv template of a resume, as JSON (default: no resume)")
	fl.StringVar(&f.command.output, "command-output", "text", "command backend: how to read its stdout, text or jsonl")
	layers.Annotate(fl)
	return cmd
}

func serve(ctx context.Context, f serveFlags, logger *slog.Logger) error {
	if f.transport != "stdio" && f.transport != "http" {
		return fmt.Errorf("transport %q is not one of stdio, http", f.transport)
	}
	if f.sessionDir == "" {
		f.sessionDir = filepath.Join(f.workspaceRoot, ".meshwork", "sessions")
	}
	reg := telemetry.NewRegistry()
	flushTelemetry, err := telemetry.Setup(ctx, telemetry.Config{
		ServiceName: "meshwork-mesh-exec", Version: buildinfo.Version, Metrics: reg, Logger: logger,
	})
	if err != nil {
		return err
	}
	// Deferred before the server's Shutdown, so it runs after it: the spans
	// of the runs Shutdown stops are flushed too.
	defer flushTelemetry()
	sessions, err := session.Open(f.sessionDir)
	if err != nil {
		return err
	}
	backends, err := newBackends(f.backend, f.binary, f.command)
	if err != nil {
		return err
	}
	cred, err := credential(f.runAs, logger)
	if err != nil {
		return err
	}
	// The agents we run share our uid (unless --run-as): they must not be
	// able to trace us, read our memory (the session's tokens) or write to
	// our stdout (the protocol), nor leave processes behind.
	if err := proctree.Protect(); err != nil {
		return err
	}
	sweeper, err := proctree.NewSweeper(logger)
	if err != nil {
		return err
	}
	prompt := f.appendPrompt
	if f.appendPromptFile != "" {
		b, err := os.ReadFile(f.appendPromptFile)
		if err != nil {
			return fmt.Errorf("reading the system prompt: %w", err)
		}
		prompt = strings.TrimSpace(prompt + "\n" + string(b))
	}
	if f.mcpConfigJSON != "" {
		if !json.Valid([]byte(f.mcpConfigJSON)) {
			return errors.New("--mcp-config-json is not valid JSON")
		}
		// Off the workspace (a tmpfs in the container): it holds a token,
		// which must not end up in workspace archives or the agent's files.
		cf, err := os.CreateTemp("", "mesh-exec-mcp-*.json")
		if err != nil {
			return fmt.Errorf("writing the MCP config: %w", err)
		}
		defer os.Remove(cf.Name())
		if _, err := cf.WriteString(f.mcpConfigJSON); err != nil {
			_ = cf.Close()
			return fmt.Errorf("writing the MCP config: %w", err)
		}
		if err := cf.Close(); err != nil {
			return fmt.Errorf("writing the MCP config: %w", err)
		}
		f.mcpConfig = cf.Name()
	}
	var allowed []string
	for _, t := range strings.Split(f.allowedTools, ",") {
		if t = strings.TrimSpace(t); t != "" {
			allowed = append(allowed, t)
		}
	}
	var hookSettings string
	var agentEnv []string
	if f.gatePolicy != "" {
		decider, err := agenthook.NewDecider(f.gatePolicy)
		if err != nil {
			return fmt.Errorf("--gate-policy: %w", err)
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--gate-policy: finding mesh-exec's own path for the hook: %w", err)
		}
		agentEnv = append(os.Environ(), agenthook.PolicyEnv+"="+f.gatePolicy)
		hookCommand := self + " hook"
		// The fast path: mesh-exec-hook beside mesh-exec asks this process,
		// which compiled the policy once (package hookwire).
		if fast := filepath.Join(filepath.Dir(self), "mesh-exec-hook"); isExecutable(fast) {
			ln, addr, err := hookwire.Listen()
			if err != nil {
				return err
			}
			defer func() { _ = ln.Close() }()
			go func() {
				if err := hookwire.Serve(ln, decider.Answer); err != nil {
					logger.ErrorContext(ctx, "answering hook events stopped", slog.Any("error", err))
				}
			}()
			hookCommand = fast
			agentEnv = append(agentEnv, hookwire.SocketEnv+"="+addr)
		}
		hookSettings = decider.Settings(hookCommand)
	}
	srv, err := server.New(server.Config{
		WorkspaceRoot: f.workspaceRoot, Backends: backends, DefaultBackend: f.backend, Sessions: sessions,
		Runner: runner.New(runner.Config{Grace: f.grace, Credential: cred, Sweeper: sweeper, Env: agentEnv}),
		Settings: backend.Settings{
			HookSettings: hookSettings,
			Model:        f.model, AllowedTools: allowed, MaxTurns: f.maxTurns, AppendSystemPrompt: prompt, MCPConfig: f.mcpConfig,
		},
		Quota: wsquota.New(f.workspaceRoot, f.maxWorkspaceBytes, f.maxWorkspaceFiles),
		Busy:  f.busy, MaxTaskBytes: f.maxTaskBytes, DefaultTimeout: f.defaultTimeout, Logger: logger, Metrics: reg,
	})
	if err != nil {
		return err
	}
	defer srv.Shutdown()

	if f.transport == "stdio" {
		// At the end of the client's input, stop the agents at once: the MCP
		// server waits for in-flight calls before Run returns, and an agent
		// may run for a long time.
		in := &eofReader{r: os.Stdin, onEOF: srv.StopRuns}
		err := srv.MCP().Run(ctx, &mcp.IOTransport{Reader: in, Writer: os.Stdout})
		if errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed) {
			return nil
		}
		return err
	}
	token, err := loadToken(f.tokenFile)
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.addr)
	if err != nil {
		return err
	}
	handler := httpHandler(srv.MCP(), token, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), telemetry.ServerName("mesh-exec", ln.Addr()))
	logger.InfoContext(ctx, "serving mesh_execute over HTTP", slog.String("addr", ln.Addr().String()))
	// On the way out the agents are stopped at once, as ever: their calls
	// then answer with error results, which the shutdown waits for.
	return mcphttp.Serve(ctx, ln, handler, logger, srv.StopRuns)
}

// httpHandler serves mcpSrv as streamable HTTP at /mcp behind the bearer
// token, with /healthz and /metrics beside it. /metrics needs no token, as
// the marketplace's: Prometheus scrapes it from inside the stack's network,
// and it holds counts, never task text or agent output. Every request but
// the probes and scrapes gets a server span, parent of the MCP spans.
// serverName, such as
// "mesh-exec:8081", is the server.address and server.port of the spans and
// metrics.
func httpHandler(mcpSrv *mcp.Server, tokens *bearer.Set, metrics http.Handler, serverName string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", metrics)
	mux.Handle("/mcp", mcphttp.Handler(mcpSrv, mcphttp.HandlerOptions{Verify: tokens.Verify}))
	return otelhttp.NewHandler(mux, "mesh-exec",
		otelhttp.WithServerName(serverName),
		// Health checks and scrapes every few seconds would bury the
		// traces that matter.
		otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/healthz" && r.URL.Path != "/metrics" }))
}

// loadToken reads mesh-exec's one bearer token, from MESH_EXEC_TOKEN or the
// file (which holds just the token): its one caller is whoever started it,
// the marketplace or the orchestrator. It is checked and kept as every
// service's tokens are (package bearer).
func loadToken(file string) (*bearer.Set, error) {
	token, from := os.Getenv("MESH_EXEC_TOKEN"), "MESH_EXEC_TOKEN"
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading the token: %w", err)
		}
		token, from = strings.TrimSpace(string(b)), "--token-file "+file
	}
	if len(token) < bearer.MinLength {
		return nil, fmt.Errorf("HTTP needs a bearer token of at least %d characters: set MESH_EXEC_TOKEN or --token-file", bearer.MinLength)
	}
	tokens, err := bearer.New(map[string]string{"client": token})
	if err != nil {
		return nil, fmt.Errorf("the bearer token of %s: %w", from, err)
	}
	return tokens, nil
}

// credential is the user agents run as. Agents never run as root: as root,
// mesh-exec needs --run-as.
func credential(runAs string, logger *slog.Logger) (*syscall.Credential, error) {
	if runAs == "" {
		if os.Geteuid() == 0 {
			logger.Warn("mesh-exec runs as root and --run-as is not set: agents will run as root; run mesh-exec as a non-root user or set --run-as")
		}
		return nil, nil
	}
	u, g, ok := strings.Cut(runAs, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil || uid == 0 {
		return nil, fmt.Errorf("--run-as %q: want a non-root uid:gid", runAs)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// isExecutable reports whether path is an executable regular file.
func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// eofReader calls onEOF once when its reader reaches the end (or fails).
type eofReader struct {
	r     io.ReadCloser
	onEOF func()
	once  sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(e.onEOF)
	}
	return n, err
}

func (e *eofReader) Close() error { return e.r.Close() }
