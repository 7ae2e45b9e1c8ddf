package journeys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	meshprogress "github.com/meshwork/meshwork/pkg/progress"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// channel is the one open MCP connection to a journey's worker: an exec
// session running the worker's MCP server, with an MCP client on it. Calls
// on one channel are serialised by mu.
type channel struct {
	mu sync.Mutex
	// container is the worker container the channel was opened in: the
	// journey may have another since (a resume or fresh spawn, perhaps by
	// another marketplace), and then this channel is stale.
	container string
	session   workerruntime.Session
	client    *mcp.ClientSession
	// broken is set when a call failed on the transport; the channel is
	// then dropped. ended is set when the session ended (the worker's
	// server exited, or the channel was closed). Atomic: Execute reads
	// them without c.mu to trust an open channel (openTo).
	broken, ended atomic.Bool
	// lastUsed is when the channel last carried a call (unix nanoseconds):
	// an idle one is closed (CloseIdleChannels).
	lastUsed atomic.Int64

	// progress receives the worker's progress notifications of the call
	// in flight, when its caller asked for them.
	progressMu sync.Mutex
	progress   Progress
	tally      *meshprogress.Tally
}

// stdin adapts a session so that closing the MCP transport's writer closes
// the process's stdin (it then exits) rather than the whole session.
type stdin struct{ s workerruntime.Session }

func (w stdin) Write(p []byte) (int, error) { return w.s.Write(p) }
func (w stdin) Close() error                { return w.s.CloseWrite() }

// openChannel starts argv in the worker and connects an MCP client to it.
func openChannel(ctx context.Context, rt workerruntime.Runtime, h workerruntime.Handle, argv []string, maxLine int) (*channel, error) {
	// The session outlives the request that opened it.
	sess, err := rt.Exec(context.WithoutCancel(ctx), h, argv)
	if err != nil {
		return nil, fmt.Errorf("starting the worker's MCP server: %w", err)
	}
	c := &channel{session: sess, container: h.ID}
	c.lastUsed.Store(time.Now().UnixNano())
	client := mcp.NewClient(&mcp.Implementation{Name: "meshwork-marketplace", Version: buildinfo.Version},
		&mcp.ClientOptions{ProgressNotificationHandler: c.forward})
	// Each call to the worker is a client span, and its trace context goes
	// along in params._meta: the worker's server (meshworker, mesh-exec)
	// continues the action's trace.
	client.AddSendingMiddleware(telemetry.ClientMiddleware())
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: sess, Writer: stdin{sess}, MaxLineLength: maxLine}, nil)
	if err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("connecting to the worker's MCP server: %w", err)
	}
	c.client = cs
	// The session ends when the worker's server exits, as it does with its
	// container; the channel then no longer vouches for the worker (openTo).
	go func() {
		_ = cs.Wait()
		c.ended.Store(true)
	}()
	return c, nil
}

// liveTo reports whether c (which may be nil) is a channel to container
// whose session goes on and that no call has found broken.
func (c *channel) liveTo(container string) bool {
	return c != nil && c.container == container && !c.broken.Load() && !c.ended.Load()
}

// progressToken is the token of every call on a channel: calls on one
// channel do not overlap.
const progressToken = "marketplace"

// forward hands a progress notification of the call in flight to its
// caller's Progress.
func (c *channel) forward(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	if req == nil || req.Params == nil || req.Params.ProgressToken != progressToken {
		return
	}
	c.progressMu.Lock()
	p, tally := c.progress, c.tally
	c.progressMu.Unlock()
	if p != nil {
		p(textcut.Valid(req.Params.Message, maxProgressMessage), req.Params.GetMeta())
		tally.Handled()
	}
}

// progressDrain bounds the wait for a call's last notifications.
const progressDrain = 2 * time.Second

// maxProgressMessage bounds a forwarded progress message: it is the
// worker's output.
const maxProgressMessage = 4 << 10

// call runs one tool; the caller holds c.mu. A transport failure marks the
// channel broken so the next action opens a new one.
func (c *channel) call(ctx context.Context, tool string, args any) (*mcp.CallToolResult, error) {
	params := &mcp.CallToolParams{Name: tool, Arguments: args}
	tally := &meshprogress.Tally{}
	if p := progressFrom(ctx); p != nil {
		params.SetProgressToken(progressToken)
		c.progressMu.Lock()
		c.progress, c.tally = p, tally
		c.progressMu.Unlock()
		defer func() {
			c.progressMu.Lock()
			c.progress, c.tally = nil, nil
			c.progressMu.Unlock()
		}()
	}
	defer func() { c.lastUsed.Store(time.Now().UnixNano()) }()
	res, err := c.client.CallTool(ctx, params)
	if res != nil {
		// The worker's last notifications may still be on their way.
		if n, ok := meshprogress.Sent(res.Meta); ok {
			tally.Wait(n, progressDrain)
		}
	}
	if err != nil && ctx.Err() == nil {
		c.broken.Store(true)
		return nil, fmt.Errorf("%w: %w", errChannelBroken, err)
	}
	return res, err
}

var errChannelBroken = errors.New("worker channel broke")

// close ends the channel at once. The exec session goes first: the client's
// Close waits for the calls in flight, and a stop must not wait for the
// action it stops (that call then fails on the transport).
func (c *channel) close() {
	_ = c.session.Close()
	_ = c.client.Close()
}

var _ io.WriteCloser = stdin{}
