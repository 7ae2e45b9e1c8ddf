package mcphttp

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/slowclient"
	"github.com/meshwork/meshwork/pkg/telemetry"
)

// MaxRequestBytes bounds one HTTP request to /mcp unless a service asks for
// another limit.
const MaxRequestBytes = 40 << 20

// HandlerOptions configures [Handler].
type HandlerOptions struct {
	// Verify checks the bearer token of every request (auth.TokenInfo's
	// UserID is the caller). Nil leaves authentication to the caller of
	// Handler, as the orchestrator's router does for /v1 and /mcp alike.
	Verify auth.TokenVerifier
	// MaxRequestBytes bounds a request's body (413 beyond it); zero means
	// the package's MaxRequestBytes.
	MaxRequestBytes int64
	// Logger receives the transport's own warnings; nil discards them.
	Logger *slog.Logger
}

// Handler serves srv over MCP's streamable HTTP transport, stateless: each
// POST is a session of its own, ended with its response, so the server
// keeps nothing between requests (no Mcp-Session-Id), there are no idle
// sessions to time out, and a client may reach any replica. Stateless is
// what the current specification (2026-07-28: no initialize handshake, no
// session id, server/discover) asks for; clients of 2025-11-25 are served
// too, their initialize answered and their calls accepted without a
// session. Progress notifications of a call ride its own response stream.
// Meshwork's tools allow it: they answer within the request and never call
// back to the client (no sampling, elicitation or roots requests). GET and
// DELETE answer 405.
//
// The span of the HTTP request is handed to the calls in it
// (telemetry.HTTPTraceHeader, for telemetry.HTTPParent). Every write of a
// response has a deadline (slowclient), so a client that stops reading
// does not hold its call's handler and what it holds.
func Handler(srv *mcp.Server, opts HandlerOptions) http.Handler {
	limit := opts.MaxRequestBytes
	if limit <= 0 {
		limit = MaxRequestBytes
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// The SDK bounds a body itself (4 MiB unless told): told this
	// handler's limit, so that a service's limit is the one that holds.
	// A call ends when its request does (the client went away or gave
	// up): its handler's context is cancelled, as over stdio, rather than
	// running on to its own timeout.
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, Logger: logger, MaxRequestBodyBytes: limit, PropagateRequestCancellation: true})
	h = slowclient.Handler(limitBody(telemetry.HTTPTraceHeader(h), limit))
	if opts.Verify != nil {
		h = auth.RequireBearerToken(opts.Verify, nil)(h)
	}
	return h
}

// limitBody refuses request bodies over limit with 413, before the
// transport reads any of it when the length is declared.
func limitBody(next http.Handler, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			http.Error(w, fmt.Sprintf("request body is larger than %d bytes", limit), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}
