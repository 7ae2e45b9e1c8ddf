package mcphttp

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// On the way out, Serve ends the session streams (GET /mcp) at once but
// returns only once the calls under way have been answered, so that their
// spans are flushed and the database is still open meanwhile.
func TestServeHTTPWaitsForCallsNotStreams(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	streaming, streamEnded := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mcp", func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		_, _ = w.Write([]byte("answered"))
	})
	mux.HandleFunc("GET /mcp", func(w http.ResponseWriter, r *http.Request) {
		defer close(streamEnded)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(streaming)
		<-r.Context().Done() // as the SDK's stream of server messages
	})
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	shutdownStarted := make(chan struct{})
	go func() {
		served <- Serve(ctx, ln, mux, slog.New(slog.DiscardHandler), func() { close(shutdownStarted) })
	}()
	url := "http://" + ln.Addr().String() + "/mcp"

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	do := func(method string) (string, error) {
		req, err := http.NewRequestWithContext(context.Background(), method, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	go func() { _, _ = do(http.MethodGet) }()
	<-streaming
	answer := make(chan string, 1)
	go func() {
		body, err := do(http.MethodPost)
		if err != nil {
			body = err.Error()
		}
		answer <- body
	}()
	<-entered

	cancel()
	<-shutdownStarted // the onShutdown functions run
	<-streamEnded     // the stream does not hold the shutdown
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a call under way", err)
	case <-time.After(200 * time.Millisecond): // a negative check needs a window
	}
	close(release)
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second): // well before Shutdown's own 10 s
		t.Fatal("Serve did not return once the call was answered")
	}
	if got := <-answer; !strings.Contains(got, "answered") {
		t.Errorf("the call under way got %q, want its answer", got)
	}
}
