package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// progress turns agent events into MCP progress notifications, with a
// heartbeat between them, when the client asked for progress.
type progress struct {
	ctx     context.Context //nolint:containedctx // the request's, for notifications; lives as long as the call
	session *mcp.ServerSession
	token   any

	mu    sync.Mutex
	count float64
	last  time.Time
	start time.Time
	done  chan struct{}
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
	go func() {
		t := time.NewTicker(heartbeat / 2)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				quiet := time.Since(p.last) >= heartbeat
				p.mu.Unlock()
				if quiet {
					p.send(fmt.Sprintf("working (%s)", time.Since(p.start).Round(time.Second)), nil)
				}
			}
		}
	}()
	return p
}

// SessionMetaKey is the _meta key of the progress notification of an
// agent's init event that carries the agent's session id, so a client (the
// orchestrator) can save the session before the call returns and resume it
// after a crash in the middle of a run.
const SessionMetaKey = "meshwork/session_id"

func (p *progress) event(ev backend.Event) {
	if p.token == nil || p.session == nil {
		return
	}
	var meta mcp.Meta
	if ev.Kind == backend.KindInit && ev.SessionID != "" {
		meta = mcp.Meta{SessionMetaKey: ev.SessionID}
	}
	msg := string(ev.Kind)
	switch {
	case ev.Tool != "":
		msg += " " + ev.Tool
	case ev.Text != "":
		text := ev.Text
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		msg += ": " + text
	}
	p.send(msg, meta)
}

func (p *progress) send(msg string, meta mcp.Meta) {
	p.mu.Lock()
	p.count++
	n := p.count
	p.last = time.Now()
	p.mu.Unlock()
	_ = p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{Meta: meta, ProgressToken: p.token, Progress: n, Message: msg})
}

func (p *progress) stop() { close(p.done) }
