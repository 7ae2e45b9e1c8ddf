package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	meshprogress "github.com/meshwork/meshwork/pkg/progress"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// progress turns agent events into MCP progress notifications, with a
// heartbeat between them, when the client asked for progress.
type progress struct {
	ctx     context.Context //nolint:containedctx // the request's, for notifications; lives as long as the call
	session *mcp.ServerSession
	token   any

	once    sync.Once
	mu      sync.Mutex
	count   float64
	last    time.Time
	start   time.Time
	done    chan struct{}
	beat    sync.WaitGroup // the heartbeat
	stopped bool           // no notification after stop
}

func newProgress(ctx context.Context, req *mcp.CallToolRequest, heartbeat time.Duration) *progress {
	p := &progress{ctx: ctx, start: time.Now(), last: time.Now(), done: make(chan struct{})}
	if req == nil || req.Params == nil {
		return p
	}
	p.token = req.Params.GetProgressToken()
	p.session = req.Session
	if p.token == nil || p.session == nil {
		return p
	}
	p.beat.Go(func() {
		t := time.NewTicker(heartbeat / 2)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				// Quiet for half the heartbeat at a tick: no gap between
				// notifications passes the heartbeat itself.
				quiet := time.Since(p.last) >= heartbeat/2
				p.mu.Unlock()
				if quiet {
					p.send(fmt.Sprintf("working (%s)", time.Since(p.start).Round(time.Second)), nil)
				}
			}
		}
	})
	return p
}

// The _meta keys of mesh_execute's progress notifications (meshapi's).
const (
	SessionMetaKey = meshapi.SessionMetaKey
	EventMetaKey   = meshapi.AgentEventMetaKey
)

func (p *progress) event(ev backend.Event) {
	if p.token == nil || p.session == nil {
		return
	}
	meta := mcp.Meta{}
	if ev.Kind == backend.KindInit && ev.SessionID != "" {
		meta[SessionMetaKey] = ev.SessionID
	}
	if ev.Kind.FromHook() {
		meta[EventMetaKey] = meshtype.AgentEvent{Kind: string(ev.Kind), Tool: ev.Tool, ToolCallID: ev.ToolCallID, Text: ev.Text, IsError: ev.IsError, Decision: ev.Decision}
	}
	p.send(progressMessage(ev), meta)
}

// progressMessage is an event as one line: its kind, then the verb, tool or
// text. Hook events also carry themselves in _meta (EventMetaKey).
func progressMessage(ev backend.Event) string {
	msg := string(ev.Kind)
	switch {
	case ev.Decision != nil:
		msg += ": " + ev.Decision.Summary
		if !ev.Decision.Allowed {
			ids := make([]string, len(ev.Decision.Violations))
			for i, v := range ev.Decision.Violations {
				ids[i] = v.ConstraintID
			}
			msg += " (refused: " + strings.Join(ids, ", ") + ")"
		}
	case ev.Kind.FromHook() && ev.Text != "":
		msg += ": " + ev.Text
	case ev.Kind == backend.KindToolResult && ev.IsError:
		// A refused or failed call: what the agent was told, so people see
		// the gate's reason too.
		msg += " " + ev.Tool + " (error): " + clip(ev.Text)
	case ev.Tool != "":
		msg += " " + ev.Tool
	case ev.Text != "":
		msg += ": " + clip(ev.Text)
	}
	return msg
}

// clip shortens an event's text for a progress message.
func clip(text string) string { return textcut.Clip(text, 300, "…") }

func (p *progress) send(msg string, meta mcp.Meta) {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.count++
	n := p.count
	p.last = time.Now()
	p.mu.Unlock()
	if len(meta) == 0 {
		meta = nil
	}
	_ = p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{Meta: meta, ProgressToken: p.token, Progress: n, Message: msg})
}

// stop ends the heartbeat, once a beat under way is sent, and any
// notification after it: the result's count (meta) is the last word. It
// may be called more than once.
func (p *progress) stop() {
	p.once.Do(func() {
		close(p.done)
		p.beat.Wait()
		p.mu.Lock()
		p.stopped = true
		p.mu.Unlock()
	})
}

// meta is the result's _meta: how many notifications were sent, so the
// client can wait for the ones still in its queue (package progress).
func (p *progress) meta() mcp.Meta {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.token == nil {
		return nil
	}
	return mcp.Meta{meshprogress.SentMetaKey: int(p.count)}
}
