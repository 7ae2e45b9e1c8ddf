package executor

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshtype"
	meshprogress "github.com/meshwork/meshwork/pkg/progress"
)

// Progress routes the progress notifications of one MCP client to its calls
// in flight, by progress token. The zero value is ready to use; its Handle
// method is the client's ProgressNotificationHandler.
type Progress struct {
	mu    sync.Mutex
	next  uint64
	calls map[string]func(*mcp.ProgressNotificationParams)
}

// Start gives a call a progress token whose notifications go to fn, until
// the returned finish is called with the call's result's _meta: it waits
// (briefly) for the notifications the server says it sent and are still
// queued (package progress), then stops; fn is never called after finish
// returned.
func (p *Progress) Start(fn func(*mcp.ProgressNotificationParams)) (token string, finish func(resultMeta map[string]any)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string]func(*mcp.ProgressNotificationParams){}
	}
	p.next++
	token = "meshwork-" + strconv.FormatUint(p.next, 10)
	var (
		mu      sync.Mutex
		stopped bool
		tally   meshprogress.Tally
	)
	p.calls[token] = func(params *mcp.ProgressNotificationParams) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			fn(params)
			tally.Handled()
		}
	}
	return token, func(resultMeta map[string]any) {
		if n, ok := meshprogress.Sent(resultMeta); ok {
			tally.Wait(n, drainTimeout)
		}
		p.mu.Lock()
		delete(p.calls, token)
		p.mu.Unlock()
		mu.Lock()
		stopped = true
		mu.Unlock()
	}
}

// drainTimeout bounds the wait for a call's last notifications.
const drainTimeout = 2 * time.Second

// Handle routes one notification.
func (p *Progress) Handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	if req == nil || req.Params == nil {
		return
	}
	token, _ := req.Params.ProgressToken.(string)
	p.mu.Lock()
	fn := p.calls[token]
	p.mu.Unlock()
	if fn != nil {
		fn(req.Params)
	}
}

// AgentEvent reads the agent event a progress notification carries in its
// _meta (mesh_execute's, or execute_in_worker's on an agent worker), if any.
func AgentEvent(params *mcp.ProgressNotificationParams) (meshtype.AgentEvent, bool) {
	raw, ok := params.GetMeta()[meshtype.AgentEventMetaKey]
	if !ok {
		return meshtype.AgentEvent{}, false
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return meshtype.AgentEvent{}, false
	}
	var ev meshtype.AgentEvent
	if json.Unmarshal(b, &ev) != nil || ev.Kind == "" {
		return meshtype.AgentEvent{}, false
	}
	return ev, true
}
