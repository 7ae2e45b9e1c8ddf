package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// MaxRequestBytes bounds one HTTP request to /mcp.
const MaxRequestBytes = 40 << 20

// NewHTTPHandler serves srv as streamable HTTP at /mcp, where a bearer token
// of a known caller is required, with /healthz, /readyz (the database is
// reachable) and /metrics beside it. Requests to /mcp are traced (server
// spans "POST /mcp"), the others are not. serverName, such as
// "marketplace:8080", is the server.address and server.port of their spans
// and metrics: otherwise they would be the client's Host header, any value
// an unauthenticated client likes.
func NewHTTPHandler(srv *mcp.Server, st *store.Store, metrics http.Handler, serverName string) http.Handler {
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		caller, err := st.Caller(ctx, store.TokenHash(token))
		if errors.Is(err, store.ErrNotFound) {
			return nil, auth.ErrInvalidToken
		}
		if err != nil {
			return nil, err
		}
		// Tokens do not expire by themselves; revoking one in the database
		// takes effect on the next request, which is verified again.
		return &auth.TokenInfo{UserID: caller, Expiration: time.Now().Add(time.Hour)}, nil
	}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	r.Get("/readyz", func(w http.ResponseWriter, req *http.Request) {
		if err := st.Ping(req.Context()); err != nil {
			http.Error(w, "database unreachable", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	if metrics != nil {
		r.Handle("/metrics", metrics)
	}
	// Only /mcp is traced: the probes and the scrapes would bury the
	// requests that matter. Its span is "POST /mcp" (GET and DELETE for the
	// stream and the session's end; otelhttp names it after the method and
	// the route chi set), outside the token check, so refused
	// requests show too. telemetry.HTTPTraceHeader hands the span to the
	// calls (telemetry.HTTPParent), which the SDK runs with the context of
	// the request that opened the session.
	traced := otelhttp.NewHandler(auth.RequireBearerToken(verify, nil)(limitBody(telemetry.HTTPTraceHeader(mcpHandler))), "/mcp",
		otelhttp.WithServerName(serverName))
	r.Handle("/mcp", traced)
	return r
}

// limitBody refuses request bodies over MaxRequestBytes with 413.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxRequestBytes {
			http.Error(w, fmt.Sprintf("request body is larger than %d bytes", MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		next.ServeHTTP(w, r)
	})
}
