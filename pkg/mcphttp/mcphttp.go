// Package mcphttp is the HTTP side of every Meshwork MCP server: the
// stateless streamable HTTP handler at /mcp that serves the current
// protocol and the previous one ([Handler]), and the server that runs it
// for the service's lifetime, with a shutdown that waits for the calls
// under way but not for open streams ([Serve]).
package mcphttp

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ShutdownTimeout bounds the wait for the calls under way on the way out.
const ShutdownTimeout = 10 * time.Second

// Serve serves handler on ln until ctx ends, then shuts the server down,
// and returns once the requests under way have ended (ShutdownTimeout at
// most), so that their spans are flushed and the service's database is
// still open while they end. (http.Server.Serve returns as soon as Shutdown
// starts; Serve waits for Shutdown.) The session streams (GET /mcp) are
// ended at once: see endStreamsOnShutdown. onShutdown functions run when
// the shutdown starts (http.Server.RegisterOnShutdown), such as stopping
// work whose calls should then answer.
func Serve(ctx context.Context, ln net.Listener, handler http.Handler, logger *slog.Logger, onShutdown ...func()) error {
	hs := &http.Server{
		Handler: endStreamsOnShutdown(ctx, handler), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	for _, f := range onShutdown {
		hs.RegisterOnShutdown(f)
	}
	served, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-served: // failed
			return
		}
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
		defer cancel()
		if err := hs.Shutdown(shutdown); err != nil {
			logger.WarnContext(ctx, "closing the HTTP connections still open", slog.Any("error", err))
			_ = hs.Close()
		}
	}()
	err := hs.Serve(ln)
	close(served)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// endStreamsOnShutdown ends the GET /mcp requests, a session's stream of
// server messages that lasts as long as the session, when ctx ends:
// http.Server.Shutdown waits for every request, and these would hold it
// to its timeout. The calls under way (POST) are waited for.
func endStreamsOnShutdown(ctx context.Context, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/mcp" {
			next.ServeHTTP(w, r)
			return
		}
		reqCtx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		next.ServeHTTP(w, r.WithContext(reqCtx))
	})
}
