// Package mcpconn is the executors' connection to one MCP server (mesh-exec
// or the marketplace): a client session on the official SDK, opened on first
// use over streamable HTTP with a bearer token, or over the stdio of a child
// process, shared by every call, and opened again when it broke.
package mcpconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/telemetry"
)

// Server is the MCP server a client calls, and how it reaches it: one of
// Endpoint and Command. The executors and the console's journey client take
// it as their configuration.
type Server struct {
	// Endpoint is the server's streamable HTTP URL, such as
	// http://127.0.0.1:8081/mcp.
	Endpoint string
	// Token is the bearer token sent in the Authorization header of every
	// HTTP request; the caller it names at the server is the client's.
	Token string
	// HTTPClient sends the HTTP requests; its Transport is wrapped to trace
	// them (a client span each, and the traceparent header) and to add the
	// token. It must have no Timeout: calls and their event streams last
	// as long as an agent runs. Defaults to a client on a transport of its
	// own, with http.DefaultTransport's settings.
	HTTPClient *http.Client
	// Command, instead of Endpoint, is the argv of a server on stdio, such
	// as mesh-exec serve --transport stdio; it is started on first use and
	// again after it exited.
	Command []string
	// Env is Command's environment. Defaults to the orchestrator's.
	Env []string
	// Logger receives operational logs. Defaults to discarding them.
	Logger *slog.Logger
}

// CheckHTTP refuses a server that is not an endpoint with a token: the
// marketplace's clients reach it over HTTP only, and as a caller.
func (s Server) CheckHTTP() error {
	if s.Endpoint == "" || s.Token == "" || len(s.Command) > 0 || len(s.Env) > 0 {
		return errors.New("an endpoint and a token are required, and a command or its environment is not taken")
	}
	return nil
}

// NewWithProgress returns a Conn to s, as an executor keeps one, whose
// progress notifications go to progress.
func NewWithProgress(s Server, progress func(context.Context, *mcp.ProgressNotificationClientRequest)) (*Conn, error) {
	return New(Config{Server: s, Options: &mcp.ClientOptions{Logger: s.Logger, ProgressNotificationHandler: progress}})
}

// Logger is what c logs to: its Server's logger, or one that discards.
func (c *Conn) Logger() *slog.Logger { return c.logger }

// Config configures a Conn.
type Config struct {
	Server
	// Name names the client to the server. Defaults to
	// "meshwork-orchestrator".
	Name string
	// Options are the client's options, such as its progress notification
	// handler. Defaults to none.
	Options *mcp.ClientOptions
}

// Conn is a lazily opened MCP client session. It is safe for concurrent
// use: calls share the session.
type Conn struct {
	cfg    Config
	client *mcp.Client
	bearer *bearerTransport // nil without a token
	logger *slog.Logger
	// closeIdle closes the HTTP transport's idle connections; a no-op for
	// a Command, or a transport that keeps none.
	closeIdle func()

	mu      sync.Mutex
	session *mcp.ClientSession
	ended   chan struct{} // closed when session's connection is gone
	closed  bool
}

// New checks cfg and returns a Conn; it connects on the first call.
func New(cfg Config) (*Conn, error) {
	if (cfg.Endpoint == "") == (len(cfg.Command) == 0) {
		return nil, errors.New("mcpconn: exactly one of Endpoint and Command is required")
	}
	if cfg.Name == "" {
		cfg.Name = "meshwork-orchestrator"
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient
		hc = &c
	}
	base := hc.Transport
	if base == nil {
		// A transport of its own: closeIdle must not close the idle
		// connections of the rest of the process.
		base = http.DefaultTransport.(*http.Transport).Clone()
	}
	closeIdle := func() {}
	if t, ok := base.(interface{ CloseIdleConnections() }); ok {
		closeIdle = t.CloseIdleConnections
	}
	// Each HTTP request is a client span whose trace context goes in the
	// traceparent header, so that the server's span of the request ("POST
	// /mcp") is in the caller's trace too, not a trace of its own.
	base = otelhttp.NewTransport(base)
	hc.Transport = base
	var bearer *bearerTransport
	if cfg.Token != "" {
		bearer = &bearerTransport{token: cfg.Token, base: base}
		hc.Transport = bearer
	}
	cfg.HTTPClient = hc
	client := mcp.NewClient(&mcp.Implementation{Name: cfg.Name, Version: buildinfo.Version}, cfg.Options)
	// Every request carries the caller's trace context in params._meta, so
	// the server's spans (mesh_execute, execute_in_worker and what they do)
	// join the trace of the node that called.
	client.AddSendingMiddleware(telemetry.ClientMiddleware())
	return &Conn{cfg: cfg, bearer: bearer, client: client, logger: logger, closeIdle: closeIdle}, nil
}

// ErrClosed is returned by calls on a closed Conn.
var ErrClosed = errors.New("mcpconn: connection closed")

// ErrSessionLost wraps the error of a call that failed because the server
// no longer knows the session (it restarted, or ended the session), when
// the call was not made again.
var ErrSessionLost = errors.New("the MCP session was lost")

// CallTool calls a tool that must not run twice: it is made at most once.
// The first call opens the session; a session that ended is opened again
// first, and so is one the server no longer knows (it restarted since the
// last call), which a ping before the call finds out. A session lost during
// the call (the SDK reports mcp.ErrSessionMissing whether the server ran
// the call or not) fails it with an error wrapping ErrSessionLost, and the
// next call opens a new session.
func (c *Conn) CallTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	return c.call(ctx, params, false)
}

// CallIdempotent calls a tool that may run twice to the same effect (one
// that reads, say): when the server no longer knows the session, it is
// opened again and the call made once more.
func (c *Conn) CallIdempotent(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	return c.call(ctx, params, true)
}

func (c *Conn) call(ctx context.Context, params *mcp.CallToolParams, idempotent bool) (*mcp.CallToolResult, error) {
	cs, fresh, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	if !fresh && !idempotent && c.lost(ctx, cs) {
		c.drop(cs)
		if cs, _, err = c.open(ctx); err != nil {
			return nil, err
		}
	}
	res, err := cs.CallTool(ctx, params)
	if err == nil || ctx.Err() != nil || !broken(err) {
		return res, err
	}
	c.drop(cs)
	if !errors.Is(err, mcp.ErrSessionMissing) {
		return nil, err
	}
	if !idempotent {
		return nil, fmt.Errorf("%w: %s ended the session during %s (did it restart?); the call may have run, so it is not made again, and the next call opens a new session: %w",
			ErrSessionLost, c.where(), params.Name, err)
	}
	c.logger.InfoContext(ctx, "MCP session lost; reconnecting", slog.String("server", c.where()), slog.Any("error", err))
	if cs, _, err = c.open(ctx); err != nil {
		return nil, err
	}
	res, err = cs.CallTool(ctx, params)
	if err != nil && ctx.Err() == nil && broken(err) {
		c.drop(cs)
	}
	return res, err
}

// lost pings cs before a call that must not run twice, and tells whether
// the server no longer knows cs (it restarted since the last call): that
// call would fail before it ran with the same error as one cut off after it
// ran, which is not made again.
func (c *Conn) lost(ctx context.Context, cs *mcp.ClientSession) bool {
	for range 2 {
		err := cs.Ping(ctx, nil)
		switch {
		case err == nil || ctx.Err() != nil:
			return false // the call reports ctx's end
		case errors.Is(err, mcp.ErrSessionMissing) || broken(err):
			c.logger.InfoContext(ctx, "MCP session lost; reconnecting", slog.String("server", c.where()), slog.Any("error", err))
			return true
		case !errors.Is(err, errRejected):
			return false // the server answered
		}
		// The ping did not reach the server, as on a kept-alive connection
		// it closed when it restarted. Every idle connection may be one of
		// those (the session's stream and its calls used several), so they
		// are all closed and the ping made once more, on a new connection.
		c.closeIdle()
	}
	return false
}

// errRejected matches the SDK's error for a message the transport did not
// deliver (jsonrpc2.ErrRejected, which is internal): an error of its code.
var errRejected = &jsonrpc.Error{Code: -32005}

// broken tells whether a call's error leaves the session unusable: anything
// but an error response of the server (which answered, so the session
// works).
func broken(err error) bool {
	var wire *jsonrpc.Error
	return !errors.As(err, &wire)
}

// Close ends the session (and stops the child of a Command). Later calls
// fail with ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	cs := c.session
	c.session, c.closed = nil, true
	c.mu.Unlock()
	if cs == nil {
		return nil
	}
	return cs.Close()
}

// open returns the session, connecting when there is none or it ended;
// fresh says it connected.
func (c *Conn) open(ctx context.Context) (_ *mcp.ClientSession, fresh bool, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false, ErrClosed
	}
	if c.session != nil {
		select {
		case <-c.ended:
			c.logger.InfoContext(ctx, "MCP session ended; reconnecting", slog.String("server", c.where()))
			_ = c.session.Close()
			c.session = nil
		default:
			return c.session, false, nil
		}
	}
	t := c.transport()
	// The session outlives this call: the transports detach what they keep
	// from ctx, and a Command is started without it. ctx's span is left
	// out, cancellation and values kept: the session's own requests (its
	// initialization, the stream of server messages that lasts as long as
	// the session, the request that ends it) are not the calling node's,
	// and would otherwise land in whichever trace opened the session.
	cs, err := c.client.Connect(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), t, nil)
	if err != nil {
		if c.bearer != nil && c.bearer.refused.Swap(false) {
			return nil, false, fmt.Errorf("connecting to %s: the server refused the bearer token (HTTP 401): %w", c.where(), err)
		}
		return nil, false, fmt.Errorf("connecting to %s: %w", c.where(), err)
	}
	ended := make(chan struct{})
	go func() {
		_ = cs.Wait()
		close(ended)
	}()
	c.session, c.ended = cs, ended
	c.logger.DebugContext(ctx, "MCP session opened", slog.String("server", c.where()))
	return cs, true, nil
}

// drop forgets cs after a failed call, so that the next call connects again.
func (c *Conn) drop(cs *mcp.ClientSession) {
	c.mu.Lock()
	if c.session == cs {
		c.session = nil
	}
	c.mu.Unlock()
	_ = cs.Close()
}

func (c *Conn) transport() mcp.Transport {
	if c.cfg.Endpoint != "" {
		return &mcp.StreamableClientTransport{Endpoint: c.cfg.Endpoint, HTTPClient: c.cfg.HTTPClient}
	}
	//nolint:noctx // the child serves the session, which outlives any one call's context
	cmd := exec.Command(c.cfg.Command[0], c.cfg.Command[1:]...)
	cmd.Env = c.cfg.Env
	return &mcp.CommandTransport{Command: cmd}
}

// where names the server in errors and logs.
func (c *Conn) where() string {
	if c.cfg.Endpoint != "" {
		return c.cfg.Endpoint
	}
	return c.cfg.Command[0]
}

// bearerTransport puts the token in the Authorization header of every
// request, and notes a refusal, which the SDK reports only as
// "Unauthorized".
type bearerTransport struct {
	token   string
	base    http.RoundTripper
	refused atomic.Bool
}

func (b *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := b.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		b.refused.Store(true)
	}
	return resp, err
}
