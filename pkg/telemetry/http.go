package telemetry

import (
	"context"
	"net"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HTTPTraceHeader puts the trace context of the HTTP request's span (the
// one otelhttp started, outside this handler) into the request's
// traceparent header, for HTTPParent. The MCP SDK hands a request's headers
// to the server (RequestExtra.Header) but runs every call of a stateful
// session with the context of the request that opened it; the header is how
// a call finds the span of its own HTTP request.
func HTTPTraceHeader(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if trace.SpanContextFromContext(r.Context()).IsValid() {
			propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
		}
		next.ServeHTTP(w, r)
	})
}

// HTTPParent is a receiving middleware, added before ServerMiddleware, that
// makes the span of the HTTP request carrying an MCP request
// (HTTPTraceHeader) the parent of what the request does. ServerMiddleware
// still prefers the trace context of params._meta when the client sent
// one. Without it, a call's spans would hang under the HTTP request that
// opened the session, long finished.
func HTTPParent() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if extra := req.GetExtra(); extra != nil && extra.Header != nil {
				ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(extra.Header))
			}
			return next(ctx, method, req)
		}
	}
}

// ServerName is the server.address and server.port of a service's HTTP
// spans and metrics (otelhttp.WithServerName), such as "marketplace:8080":
// the service and the port it listens on. Without it otelhttp takes them
// from the request's Host header, any value a client likes, token or not.
func ServerName(service string, addr net.Addr) string {
	port := "0" // none, rather than the Host header's
	if addr != nil {
		if _, p, err := net.SplitHostPort(addr.String()); err == nil {
			port = p
		}
	}
	return net.JoinHostPort(service, port)
}
