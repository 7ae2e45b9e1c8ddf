package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// maxReconnectDelay caps the wait between reconnections.
const maxReconnectDelay = 10 * time.Second

// Events calls fn with a run's events, from its checkpoints after seq after
// on (a negative after means from the run's start), until the event of type
// "run" (the run ended or waits for an approval), which is the last one
// fn gets; then Events returns nil. It returns fn's error as is, ctx's
// error when ctx ends, and an *Error when the server refuses the stream or
// reports a failure in it (an "error" event; Status 0).
//
// A stream that drops is reconnected with after set to the last checkpoint
// seen, up to Reconnects times in a row, waiting ReconnectDelay (doubling)
// between tries. fn does not see an event twice: checkpoints at or before
// the last one seen and attempts already seen (the server sends a run's
// attempts again on every connection) are dropped.
func (c *Client) Events(ctx context.Context, runID string, after int, fn func(api.Event) error) error {
	d := &dedup{last: after, attempts: map[int64]bool{}, fn: fn}
	if d.last < 0 {
		d.last = -1
	}
	tries := 0
	delay := c.ReconnectDelay
	for {
		delivered := d.delivered
		err := c.stream(ctx, runID, d.last, d.deliver)
		var dropped *droppedError
		switch {
		case err == nil:
			return nil
		case !errors.As(err, &dropped):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if d.delivered > delivered {
			tries, delay = 0, c.ReconnectDelay // it made progress
		}
		tries++
		if tries > c.Reconnects {
			return fmt.Errorf("the event stream of run %s dropped %d times in a row: %w", runID, tries, dropped.err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, maxReconnectDelay)
	}
}

// droppedError is a stream that ended before its run event, or a
// reconnection that failed in a way worth trying again.
type droppedError struct{ err error }

func (e *droppedError) Error() string { return "event stream dropped: " + e.err.Error() }
func (e *droppedError) Unwrap() error { return e.err }

// errRunEvent ends a stream at its run event.
var errRunEvent = errors.New("run event")

// dedup passes each event to fn once across reconnections.
type dedup struct {
	fn        func(api.Event) error
	last      int // the last checkpoint's seq
	attempts  map[int64]bool
	delivered int
}

func (d *dedup) deliver(ev api.Event) error {
	switch ev.Type {
	case "checkpoint":
		if ev.Seq <= d.last {
			return nil
		}
		d.last = ev.Seq
	case "attempt":
		if ev.Attempt != nil && ev.Attempt.ID != 0 {
			if d.attempts[ev.Attempt.ID] {
				return nil
			}
			d.attempts[ev.Attempt.ID] = true
		}
	}
	d.delivered++
	if err := d.fn(ev); err != nil {
		return err
	}
	if ev.Type == "run" {
		return errRunEvent
	}
	return nil
}

// stream reads one connection of a run's event stream. It returns nil after
// the run event, a *droppedError when the stream should be tried again,
// and any other error as final.
func (c *Client) stream(ctx context.Context, runID string, after int, deliver func(api.Event) error) error {
	q := url.Values{}
	if after >= 0 {
		q.Set("after", strconv.Itoa(after))
	}
	req, err := c.newRequest(ctx, http.MethodGet, runPath(runID, "/events"), q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req)
	if err != nil {
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			return err // the run does not exist, the token is wrong, ...
		}
		return &droppedError{err}
	}
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return fmt.Errorf("GET %s: the server answered %q, not an event stream", req.URL.Path, resp.Header.Get("Content-Type"))
	}
	r := newSSEReader(resp.Body)
	for {
		sse, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the server ends the stream after the run event
			}
			return &droppedError{err}
		}
		if sse.Name == "error" {
			// A failure after the stream started has no HTTP status of
			// its own: Status is 0. The server shutting down is worth
			// a reconnection (to another replica).
			var body errorBody
			if json.Unmarshal([]byte(sse.Data), &body) == nil && (body.Error.Message != "" || body.Error.Code != "") {
				e := &Error{Code: body.Error.Code, Message: body.Error.Message}
				if e.Code == "unavailable" { // meshapi.CodeUnavailable, not imported: meshctl stays small
					return &droppedError{e}
				}
				return e
			}
		}
		var ev api.Event
		if err := json.Unmarshal([]byte(sse.Data), &ev); err != nil {
			return fmt.Errorf("decoding a %q event of run %s: %w", sse.Name, runID, err)
		}
		if ev.Type == "" {
			ev.Type = sse.Name
		}
		if err := deliver(ev); err != nil {
			if errors.Is(err, errRunEvent) {
				return nil
			}
			return err
		}
	}
}
