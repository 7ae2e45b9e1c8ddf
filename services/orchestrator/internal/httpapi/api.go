// Package httpapi is the orchestrator's HTTP surface, on chi: the REST API
// under /v1 (pipelines, runs, checkpoints, forks, interrupts, cancellation,
// pruning, and a run's events as Server-Sent Events), its OpenAPI document at
// /v1/openapi.json, the MCP tools at /mcp (streamable HTTP), and /healthz,
// /readyz and /metrics beside them.
//
// /v1 and /mcp need a bearer token of a known caller ([bearer.Set]); the caller is
// recorded with the runs it starts and the decisions it makes. Errors are
// JSON: {"error":{"code":"not_found","message":"..."}}.
//
// Every request but the probes and /metrics is an OpenTelemetry server
// span named after its route ("GET /v1/runs/{id}"), in the caller's trace
// when it sent a traceparent header; a run started by a request continues
// that trace.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

// Config configures the API.
type Config struct {
	// Engine serves the operations. Required.
	Engine *engine.Engine
	// Tokens authenticates /v1 and /mcp. Required; with no tokens every
	// request to them is refused.
	Tokens *bearer.Set
	// MCP is the MCP server's stateless streamable HTTP handler
	// (mcptools.HTTPHandler), served at POST /mcp behind the bearer tokens.
	// The caller reaches its tools as the request's auth.TokenInfo UserID.
	// Defaults to none (/mcp is 404).
	MCP http.Handler
	// Console is the web console (package console), served at / beside
	// the API; it authenticates its own way (a session cookie). Defaults to
	// none.
	Console http.Handler
	// SessionCaller, when set, authenticates GET /v1/runs/{id}/events by a
	// console session (console.SessionCaller) when the request has no
	// bearer token: the console's pages follow a run with EventSource,
	// which cannot send one. Every other route needs the token.
	SessionCaller func(*http.Request) (string, bool)
	// Admins are the callers that see and act on every caller's runs;
	// any other caller sees only the runs it started. Defaults to none.
	Admins []string
	// Ready reports whether the orchestrator can serve, for /readyz (a
	// database ping). Defaults to always ready.
	Ready func(context.Context) error
	// Metrics counts requests and runs started. Defaults to metrics on a
	// registry of their own.
	Metrics *Metrics
	// Gatherer is what /metrics exposes. Defaults to Metrics' registry when
	// Metrics is defaulted, else to none (/metrics is 404).
	Gatherer prometheus.Gatherer
	// Logger receives a line per request and the errors behind 500s.
	// Defaults to discarding them.
	Logger *slog.Logger
	// MaxEventStreams bounds the event streams served at once; more are
	// refused with a 503. Defaults to DefaultMaxEventStreams.
	MaxEventStreams int
	// ServerName is the server.address and server.port of the request
	// spans and metrics, such as "orchestrator:8090"; without it they would
	// be the client's Host header, any value a client likes. Defaults to
	// "orchestrator" (and no port).
	ServerName string
}

// API is the orchestrator's HTTP handler.
type API struct {
	eng     *engine.Engine
	tokens  *bearer.Set
	session func(*http.Request) (string, bool)
	admins  map[string]bool
	ready   func(context.Context) error
	metrics *Metrics
	logger  *slog.Logger
	router  chi.Router
	// handler is router in a server span per request (but the probes').
	handler http.Handler

	// closing is closed by CloseStreams to end the event streams.
	closing   chan struct{}
	closeOnce sync.Once
	// streams holds a token per event stream served.
	streams chan struct{}
}

// New builds the API.
func New(cfg Config) (*API, error) {
	if cfg.Engine == nil || cfg.Tokens == nil {
		return nil, errors.New("httpapi: Engine and Tokens are required")
	}
	maxStreams := cfg.MaxEventStreams
	if maxStreams <= 0 {
		maxStreams = DefaultMaxEventStreams
	}
	a := &API{
		eng: cfg.Engine, tokens: cfg.Tokens, session: cfg.SessionCaller, ready: cfg.Ready, metrics: cfg.Metrics, logger: cfg.Logger,
		closing: make(chan struct{}), streams: make(chan struct{}, maxStreams), admins: map[string]bool{},
	}
	for _, c := range cfg.Admins {
		a.admins[c] = true
	}
	if a.logger == nil {
		a.logger = slog.New(slog.DiscardHandler)
	}
	gatherer := cfg.Gatherer
	if a.metrics == nil {
		reg := prometheus.NewRegistry()
		a.metrics = NewMetrics(reg)
		if gatherer == nil {
			gatherer = reg
		}
	}

	r := chi.NewRouter()
	notFound := func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, meshapi.CodeNotFound, "no such path; see /v1/openapi.json")
	}
	notAllowed := func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, "method not allowed on this path; see /v1/openapi.json")
	}
	r.NotFound(notFound)
	r.MethodNotAllowed(notAllowed)
	r.Use(a.observe)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.Get("/readyz", a.readyz)
	if gatherer != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	r.Route("/v1", func(r chi.Router) {
		// Under /v1 a path that is not a route needs a token too, as the
		// routes do: without one it is 401, not a map of what exists.
		r.NotFound(a.authenticate(http.HandlerFunc(notFound)).ServeHTTP)
		r.MethodNotAllowed(a.authenticate(http.HandlerFunc(notAllowed)).ServeHTTP)
		// The one route a console session may read (see
		// authenticateOrSession); the middleware runs once it is routed.
		r.With(a.authenticateOrSession).Get("/runs/{id}/events", a.streamEvents)
		r.Group(func(r chi.Router) {
			r.Use(a.authenticate)
			r.Get("/openapi.json", serveOpenAPI)
			r.Get("/pipelines", a.listPipelines)
			r.Post("/runs", a.startRun)
			r.Get("/runs", a.listRuns)
			r.Get("/runs/{id}", a.getRun)
			r.Get("/runs/{id}/checkpoints", a.listCheckpoints)
			r.Get("/runs/{id}/nodes/{node}/workspace", a.exportWorkspace)
			r.Post("/runs/{id}/fork", a.forkRun)
			r.Post("/runs/{id}/cancel", a.cancelRun)
			r.Post("/runs/{id}/resume", a.resumeRun)
			r.Post("/runs/{id}/prune", a.pruneRun)
			r.Post("/interrupts/{id}/resume", a.resumeInterrupt)
		})
	})
	r.Group(func(r chi.Router) {
		r.Use(a.authenticate)
		if cfg.MCP != nil {
			// The SDK reads the caller from its own TokenInfo, which only
			// its middleware can set; the token was checked just before,
			// so this second check always passes.
			// The handler is stateless: POST only (no server-to-client
			// stream to GET, no session to DELETE).
			r.Method(http.MethodPost, "/mcp", auth.RequireBearerToken(a.tokens.Verify, nil)(cfg.MCP))
		}
	})
	if cfg.Console != nil {
		// Everything the API does not serve: /, /runs, /signin, ...
		r.Mount("/", cfg.Console)
	}
	a.router = r
	// A server span per request, the child of the caller's traceparent
	// header if any; observe names it after the route once chi has routed
	// the request. Probes and scrapes, every few seconds each, would only
	// bury the traces that matter.
	serverName := cfg.ServerName
	if serverName == "" {
		// Port 0: none, rather than the Host header's.
		serverName = "orchestrator:0"
	}
	a.handler = otelhttp.NewHandler(r, "orchestrator", otelhttp.WithServerName(serverName), otelhttp.WithFilter(func(r *http.Request) bool {
		switch r.URL.Path {
		case "/healthz", "/readyz", "/metrics":
			return false
		}
		return true
	}))
	return a, nil
}

// ServeHTTP serves a request.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

// nameSpan names the request's server span after chi's route pattern,
// "GET /v1/runs/{id}", and sets http.route on it and on otelhttp's metrics:
// the path itself (ids in it) would make a name per run. otelhttp cannot,
// being outside the router: the request chi routes is a copy of its own.
// An unrouted request keeps the method alone as its name.
func nameSpan(r *http.Request, method, route string) {
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	if method == "OTHER" {
		method = "HTTP" // as the HTTP semantic conventions name it
	}
	span.SetName(method + " " + route)
	span.SetAttributes(semconv.HTTPRoute(route))
	if l, ok := otelhttp.LabelerFromContext(r.Context()); ok {
		l.Add(semconv.HTTPRoute(route))
	}
}

// CloseStreams ends the open event streams (their clients reconnect with
// Last-Event-ID), so that a server shutdown need not wait for runs to end.
// Register it with http.Server.RegisterOnShutdown.
func (a *API) CloseStreams() { a.closeOnce.Do(func() { close(a.closing) }) }

func (a *API) readyz(w http.ResponseWriter, r *http.Request) {
	if a.ready != nil {
		if err := a.ready(r.Context()); err != nil {
			a.logger.WarnContext(r.Context(), "not ready", slog.Any("error", err))
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

// requestInfo is filled in as a request is served, for its log line.
type requestInfo struct{ caller string }

type requestInfoKey struct{}

// observe logs each request and counts it by chi's route pattern, and turns
// a panic into a 500.
func (a *API) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// No response is to be read as anything but its declared type
		// (a JSON error is no script, whatever a page tries).
		w.Header().Set("X-Content-Type-Options", "nosniff")
		info := &requestInfo{}
		r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info))
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
					panic(p)
				}
				a.logger.ErrorContext(r.Context(), "handler panicked", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
				if rec.status == 0 {
					writeError(rec, http.StatusInternalServerError, meshapi.CodeInternal, internalMessage)
				}
			}
			method, route := methodLabel(r.Method), chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = "unmatched"
			} else {
				nameSpan(r, method, route)
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			elapsed := time.Since(start)
			a.metrics.observeRequest(method, route, status, elapsed)
			level := slog.LevelInfo
			switch route {
			case "/healthz", "/readyz", "/metrics":
				level = slog.LevelDebug
			}
			a.logger.LogAttrs(r.Context(), level, "request",
				slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
				slog.Int("status", status), slog.Duration("duration", elapsed), slog.String("caller", info.caller))
		}()
		next.ServeHTTP(rec, r)
	})
}

// methodLabel is a request's method as a metric label: one of the standard
// methods, else "OTHER". Requests are counted before they are authenticated
// or routed, so a label taken as sent would let anyone add series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return m
	}
	return "OTHER"
}

// statusRecorder remembers the status a handler wrote. It unwraps for
// http.ResponseController, so event streams can flush.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// FlushError flushes, for http.ResponseController.
func (s *statusRecorder) FlushError() error {
	return http.NewResponseController(s.ResponseWriter).Flush()
}

// Flush flushes, for handlers that look for an http.Flusher.
func (s *statusRecorder) Flush() { _ = s.FlushError() }
