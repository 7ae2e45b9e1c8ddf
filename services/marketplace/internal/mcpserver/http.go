package mcpserver

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/mcphttp"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// MaxRequestBytes bounds one HTTP request to /mcp.
const MaxRequestBytes = mcphttp.MaxRequestBytes

// NewHTTPHandler serves srv as streamable HTTP at /mcp, where a bearer token
// of a known caller is required, with /healthz, /readyz (the database is
// reachable) and /metrics beside it. Requests to /mcp are traced (server
// spans "POST /mcp"), the others are not. serverName, such as
// "marketplace:8080", is the server.address and server.port of their spans
// and metrics: otherwise they would be the client's Host header, any value
// an unauthenticated client likes.
func NewHTTPHandler(srv *mcp.Server, st *store.Store, metrics http.Handler, serverName string) http.Handler {
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		caller, err := st.Caller(ctx, bearer.Hash(token))
		if errors.Is(err, store.ErrNotFound) {
			return nil, auth.ErrInvalidToken
		}
		if err != nil {
			return nil, err
		}
		// Revoking a token in the database takes effect on the next
		// request, which is verified again.
		return bearer.Info(caller), nil
	}
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
	// requests that matter. Its span is "POST /mcp", outside the token
	// check, so refused requests show too.
	traced := otelhttp.NewHandler(mcphttp.Handler(srv, mcphttp.HandlerOptions{Verify: verify, MaxRequestBytes: MaxRequestBytes}), "/mcp",
		otelhttp.WithServerName(serverName))
	r.Handle("/mcp", traced)
	return r
}
