package mcpconn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/executortest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mcpconn"
)

// server is an MCP server on streamable HTTP that can restart: a restart
// forgets every session and cuts the connections, as a new process would.
// Its tool "work" counts its calls, per server process; with block set, a
// call waits until its process ends.
type server struct {
	hs      *httptest.Server
	block   atomic.Bool
	started chan struct{} // a call of work started

	mu      sync.Mutex
	mcp     *mcp.Server
	handler http.Handler
	dead    chan struct{}   // closed when the process ends
	calls   []*atomic.Int32 // per process
}

func startServer(t *testing.T) *server {
	t.Helper()
	s := &server{started: make(chan struct{}, 10)}
	s.boot()
	s.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := s.handler
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		s.mu.Lock()
		srv, dead := s.mcp, s.dead
		s.mu.Unlock()
		close(dead)
		closeSessions(srv)
		s.hs.Close()
	})
	return s
}

func (s *server) boot() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	calls, dead := &atomic.Int32{}, make(chan struct{})
	mcp.AddTool(srv, &mcp.Tool{Name: "work"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, map[string]any, error) {
		n := calls.Add(1)
		if s.block.Load() {
			// Under way, as an agent reports its progress: the response
			// has begun (the SDK no longer takes the call for one that
			// never reached the server).
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Message: "working"}); err != nil {
				return nil, nil, err
			}
			s.started <- struct{}{}
			select {
			case <-ctx.Done():
			case <-dead:
			}
			return nil, nil, errors.New("stopped")
		}
		s.started <- struct{}{}
		return nil, map[string]any{"call": n}, nil
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mcp, s.dead, s.calls = srv, dead, append(s.calls, calls)
	// With an event store, as a server whose streams resume: a call's
	// stream cut off is resumed with a GET of its last event, which a
	// restarted server answers 404, and the SDK then fails the call with
	// mcp.ErrSessionMissing, as it does a call the server refused.
	s.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
}

// restart replaces the server process: the sessions are gone, and so are
// the connections to the old one.
func (s *server) restart() {
	s.mu.Lock()
	old, dead := s.mcp, s.dead
	s.mu.Unlock()
	s.boot()
	s.hs.CloseClientConnections()
	close(dead)
	closeSessions(old)
}

func closeSessions(srv *mcp.Server) {
	for ss := range srv.Sessions() {
		_ = ss.Close()
	}
}

// callsOf is how many calls of work the n-th server process (from 0) had.
func (s *server) callsOf(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n >= len(s.calls) {
		return 0
	}
	return int(s.calls[n].Load())
}

func newConn(t *testing.T, s *server) *mcpconn.Conn {
	t.Helper()
	c, err := mcpconn.New(mcpconn.Config{Server: mcpconn.Server{Endpoint: s.hs.URL, HTTPClient: executortest.HTTPClient(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var work = func() *mcp.CallToolParams {
	p := &mcp.CallToolParams{Name: "work", Arguments: map[string]any{}}
	p.SetProgressToken("work")
	return p
}()

// cutOff makes a call that the server's restart interrupts, and returns
// its outcome.
func cutOff(t *testing.T, s *server, call func(context.Context) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.block.Store(true)
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := call(ctx)
		done <- outcome{res, err}
	}()
	<-s.started
	s.block.Store(false)
	s.restart()
	o := <-done
	if ctx.Err() != nil {
		t.Fatalf("the call did not end within 30s after the restart: %v", o.err)
	}
	return o.res, o.err
}

// A call cut off by a restart of the server may have run: CallTool does not
// make it again, says why, and the next call works on a new session.
func TestCallCutOffIsNotRepeated(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := newConn(t, s)
	if _, err := c.CallTool(context.Background(), work); err != nil {
		t.Fatal(err)
	}
	<-s.started
	_, err := cutOff(t, s, func(ctx context.Context) (*mcp.CallToolResult, error) { return c.CallTool(ctx, work) })
	if !errors.Is(err, mcpconn.ErrSessionLost) || !errors.Is(err, mcp.ErrSessionMissing) || !strings.Contains(err.Error(), "not made again") {
		t.Fatalf("error %v; want ErrSessionLost, saying the call is not made again", err)
	}
	if n := s.callsOf(1); n != 0 {
		t.Fatalf("the restarted server had %d calls; want none (the cut-off call not repeated)", n)
	}
	res, err := c.CallTool(context.Background(), work)
	if err != nil || res.IsError {
		t.Fatalf("the next call: %+v, %v", res, err)
	}
	<-s.started
	if n := s.callsOf(1); n != 1 {
		t.Errorf("the restarted server had %d calls; want 1", n)
	}
}

// An idempotent call cut off by a restart is made again on a new session.
func TestIdempotentCallIsRepeated(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := newConn(t, s)
	res, err := cutOff(t, s, func(ctx context.Context) (*mcp.CallToolResult, error) { return c.CallIdempotent(ctx, work) })
	if err != nil || res.IsError {
		t.Fatalf("%+v, %v; want the call made again", res, err)
	}
	<-s.started
	if a, b := s.callsOf(0), s.callsOf(1); a != 1 || b != 1 {
		t.Errorf("calls %d before the restart, %d after; want 1 and 1", a, b)
	}
}

// A restart between calls is found out before the next call, which then
// runs once, on a new session, without an error.
func TestRestartBetweenCalls(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := newConn(t, s)
	for range 2 {
		if _, err := c.CallTool(context.Background(), work); err != nil {
			t.Fatal(err)
		}
		<-s.started
	}
	s.restart()
	res, err := c.CallTool(context.Background(), work)
	if err != nil || res.IsError {
		t.Fatalf("after a restart: %+v, %v", res, err)
	}
	<-s.started
	if a, b := s.callsOf(0), s.callsOf(1); a != 2 || b != 1 {
		t.Errorf("calls %d before the restart, %d after; want 2 and 1", a, b)
	}
}

// A call's HTTP request carries the caller's trace context in its
// traceparent header, so that the server's span of it ("POST /mcp") is in
// the caller's trace; the requests of the session it opens (initialize and
// what follows) are not, the session outliving the call. Not parallel: it
// sets the process's tracer provider and propagator.
func TestCallCarriesTraceparent(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})

	type request struct{ what, traceparent string }
	var (
		mu       sync.Mutex
		requests []request
	)
	srv := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "work"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]any, error) {
		return nil, map[string]any{}, nil
	})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &msg)
		mu.Lock()
		requests = append(requests, request{r.Method + " " + msg.Method, r.Header.Get("traceparent")})
		mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		closeSessions(srv)
		hs.Close()
	})
	c, err := mcpconn.New(mcpconn.Config{Server: mcpconn.Server{Endpoint: hs.URL, Token: "a-token", HTTPClient: executortest.HTTPClient(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	ctx, node := tp.Tracer("test").Start(context.Background(), "node")
	res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "work", Arguments: map[string]any{}})
	node.End()
	if err != nil || res.IsError {
		t.Fatalf("work: %+v, %v", res, err)
	}
	traceOf := func(traceparent string) string {
		if parts := strings.Split(traceparent, "-"); len(parts) == 4 {
			return parts[1]
		}
		return ""
	}
	caller := node.SpanContext().TraceID().String()
	mu.Lock()
	defer mu.Unlock()
	var called, initialized bool
	for _, r := range requests {
		switch r.what {
		case "POST tools/call":
			called = true
			if traceOf(r.traceparent) != caller {
				t.Errorf("the call's request has traceparent %q, want one of the caller's trace %s", r.traceparent, caller)
			}
		case "POST initialize":
			initialized = true
			fallthrough
		default:
			if traceOf(r.traceparent) == caller {
				t.Errorf("the session's request %q is in the caller's trace", r.what)
			}
		}
	}
	if !called || !initialized {
		t.Fatalf("requests %v: want an initialize and the call", requests)
	}
}
