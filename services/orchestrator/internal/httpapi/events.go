package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

// Event streams send their headers with the first event, or after
// streamHeaderDelay when none has come (a run with no news), and a comment
// every streamKeepalive so that proxies keep the connection. Each write must
// be done within streamWriteTimeout, so that a client that stops reading
// does not hold its handler (and a slot of DefaultMaxEventStreams) forever.
const (
	streamHeaderDelay  = time.Second
	streamKeepalive    = 15 * time.Second
	streamWriteTimeout = 30 * time.Second
)

// DefaultMaxEventStreams is how many event streams an API serves at once
// unless Config.MaxEventStreams says otherwise.
const DefaultMaxEventStreams = 64

// streamEvents serves GET /v1/runs/{id}/events: the run's events as
// Server-Sent Events, "event: <type>" and "data: <engine.Event JSON>",
// ending after the "run" event. Checkpoint events carry their seq as the
// event id, so a client that reconnects with Last-Event-ID resumes after it.
func (a *API) streamEvents(w http.ResponseWriter, r *http.Request) {
	after := -1
	if s := r.URL.Query().Get("after"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < -1 || n > math.MaxInt32 {
			invalidf(w, "after %q must be a checkpoint seq (up to %d), or -1 for every event", s, math.MaxInt32)
			return
		}
		after = n
	} else if s := r.Header.Get("Last-Event-ID"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= -1 && n <= math.MaxInt32 {
			after = n
		}
	}
	select {
	case a.streams <- struct{}{}:
		defer func() { <-a.streams }()
	default:
		// A server-wide bound, not the client's fault: 503, which clients
		// (meshctl) try again after a while.
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, meshapi.CodeUnavailable,
			fmt.Sprintf("this orchestrator already serves %d event streams; try again later, or poll GET /v1/runs/{id}", cap(a.streams)))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	s := &sseStream{w: w, rc: http.NewResponseController(w)}

	var interrupted atomic.Bool // the server is shutting down, or the client is gone
	var wg sync.WaitGroup
	wg.Go(func() {
		timer := time.NewTimer(streamHeaderDelay)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-a.closing:
				interrupted.Store(true)
				cancel()
				return
			case <-timer.C:
				if err := s.comment("keepalive"); err != nil {
					interrupted.Store(true)
					cancel()
					return
				}
				timer.Reset(streamKeepalive)
			}
		}
	})
	err := a.eng.Watch(ctx, chi.URLParam(r, "id"), after, s.send)
	cancel()
	wg.Wait()
	var code meshapi.Code
	var msg string
	switch {
	case err == nil, r.Context().Err() != nil:
		return // the run ended or parked, or the client left
	case s.failure() != nil:
		// The client is gone or stopped reading: nobody to tell.
		a.logger.InfoContext(r.Context(), "event stream dropped: the client does not read it", slog.String("path", r.URL.Path), slog.Any("error", s.failure()))
		return
	case interrupted.Load():
		if !s.started {
			writeError(w, http.StatusServiceUnavailable, meshapi.CodeUnavailable, shutdownMessage)
			return
		}
		code, msg = meshapi.CodeUnavailable, shutdownMessage
	case !s.started:
		a.fail(w, r, err)
		return
	default: // mid-stream, an error is an event of its own
		var ok bool
		if _, code, ok = classify(err); ok {
			msg = err.Error()
		} else {
			a.logger.ErrorContext(r.Context(), "event stream failed", slog.String("path", r.URL.Path), slog.Any("error", err))
			msg = internalMessage
		}
	}
	data, _ := json.Marshal(errorBody{Error: errorDetail{Code: code, Message: msg}})
	_ = s.write("event: error\ndata: " + string(data) + "\n\n")
}

const shutdownMessage = "the orchestrator is shutting down; reconnect with Last-Event-ID"

// sseStream writes one response's events; the keepalive goroutine and the
// watcher share it.
type sseStream struct {
	mu       sync.Mutex
	w        http.ResponseWriter
	rc       *http.ResponseController
	started  bool
	writeErr error // the first failed write: the stream is dead
}

func (s *sseStream) send(ev engine.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	msg := ""
	if ev.Type == "checkpoint" {
		msg = "id: " + strconv.Itoa(ev.Seq) + "\n"
	}
	return s.write(msg + "event: " + ev.Type + "\ndata: " + string(data) + "\n\n")
}

func (s *sseStream) comment(text string) error { return s.write(": " + text + "\n\n") }

// failure is the error of the write that failed, if one did.
func (s *sseStream) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeErr
}

// write writes msg and flushes it, within streamWriteTimeout.
func (s *sseStream) write(msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	err := s.writeLocked(msg)
	if err != nil {
		s.writeErr = err
	}
	return err
}

func (s *sseStream) writeLocked(msg string) error {
	// The server has no WriteTimeout (a stream lasts as long as its run),
	// so each write gets a deadline of its own; net/http clears it when the
	// response ends.
	if err := s.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	if _, err := fmt.Fprint(s.w, msg); err != nil {
		return err
	}
	return s.rc.Flush()
}
