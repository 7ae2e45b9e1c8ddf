// Package mcptest connects MCP clients for tests: the official SDK's client
// over streamable HTTP, sending a bearer token, closed when the test ends.
// Only tests import it.
package mcptest

import (
	"context"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options change a client. The zero value is a plain client.
type Options struct {
	// Base sends the requests. Defaults to a transport of the client's own,
	// whose idle connections are closed when the test ends.
	Base http.RoundTripper
	// Client are the SDK client's options (a progress handler, say).
	Client *mcp.ClientOptions
	// Sending are the client's sending middleware (one that sends the
	// trace context, say).
	Sending []mcp.Middleware
}

// Connect connects to the MCP endpoint (a URL ending in /mcp) as the
// caller of token.
func Connect(tb testing.TB, endpoint, token string, opts *Options) *mcp.ClientSession {
	tb.Helper()
	if opts == nil {
		opts = &Options{}
	}
	base := opts.Base
	if base == nil {
		own := http.DefaultTransport.(*http.Transport).Clone()
		tb.Cleanup(own.CloseIdleConnections)
		base = own
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "meshwork-test", Version: "v0"}, opts.Client)
	c.AddSendingMiddleware(opts.Sending...)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: Bearer{Token: token, Base: base}},
	}, nil)
	if err != nil {
		tb.Fatalf("connecting to %s: %v", endpoint, err)
	}
	tb.Cleanup(func() { _ = cs.Close() })
	return cs
}

// Bearer sends Token in each request's Authorization header.
type Bearer struct {
	Token string
	Base  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	return b.Base.RoundTrip(r)
}
