// Package journeyview reads and stops a caller's marketplace journeys for
// the console, on that caller's behalf: the orchestrator's marketplace
// caller is one of the marketplace's delegates, and names the signed-in
// caller in each call's _meta (meshapi.OnBehalfOfMetaKey), so the console
// shows a person exactly the journeys and audit rows the marketplace would
// show them.
package journeyview

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mcpconn"
)

// Config is where the client finds the marketplace: Endpoint and Token,
// the orchestrator's bearer token there, whose caller must be one of the
// marketplace's delegates. Both are required; a Command is refused.
type Config = mcpconn.Server

// Client calls the marketplace for the console. It is safe for concurrent
// use.
type Client struct {
	conn *mcpconn.Conn
}

// New checks cfg and returns a Client; it connects on the first call.
func New(cfg Config) (*Client, error) {
	if err := cfg.CheckHTTP(); err != nil {
		return nil, fmt.Errorf("journeyview: %w", err)
	}
	conn, err := mcpconn.New(mcpconn.Config{Server: cfg, Name: "meshwork-console"})
	if err != nil {
		return nil, fmt.Errorf("journeyview: %w", err)
	}
	return &Client{conn: conn}, nil
}

// Close ends the connection to the marketplace.
func (c *Client) Close() error { return c.conn.Close() }

// List is list_journeys for caller.
func (c *Client) List(ctx context.Context, caller string, in meshapi.ListJourneysIn) (meshapi.ListJourneysOut, error) {
	var out meshapi.ListJourneysOut
	return out, c.call(ctx, caller, meshapi.ToolListJourneys, in, true, &out)
}

// State is get_worker_state for caller.
func (c *Client) State(ctx context.Context, caller, journeyID string) (meshapi.Journey, error) {
	var out meshapi.Journey
	return out, c.call(ctx, caller, meshapi.ToolGetWorkerState, map[string]string{"journey_id": journeyID}, true, &out)
}

// Audit is journey_audit for caller.
func (c *Client) Audit(ctx context.Context, caller string, in meshapi.JourneyAuditIn) (meshapi.JourneyAuditOut, error) {
	var out meshapi.JourneyAuditOut
	return out, c.call(ctx, caller, meshapi.ToolJourneyAudit, in, true, &out)
}

// Stop is stop_worker for caller. It is never repeated: a stop cut off on
// the way fails, and the journey's state tells what became of it.
func (c *Client) Stop(ctx context.Context, caller string, in meshapi.StopWorkerIn) (meshapi.StopWorkerOut, error) {
	var out meshapi.StopWorkerOut
	return out, c.call(ctx, caller, meshapi.ToolStopWorker, in, false, &out)
}

// call calls tool on behalf of caller and decodes its structured content
// into out (when not nil). A tool error is returned as the *meshapi.Error it
// carries, so the console can tell "not found" from the rest.
func (c *Client) call(ctx context.Context, caller, tool string, in any, idempotent bool, out any) error {
	params := &mcp.CallToolParams{Meta: mcp.Meta{meshapi.OnBehalfOfMetaKey: caller}, Name: tool, Arguments: in}
	call := c.conn.CallTool
	if idempotent {
		call = c.conn.CallIdempotent
	}
	res, err := call(ctx, params)
	if err != nil {
		return fmt.Errorf("%s at the marketplace: %w", tool, err)
	}
	if e, failed := meshapi.ErrorOf(res); failed {
		return e
	}
	if out == nil {
		return nil
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		return fmt.Errorf("%s at the marketplace: reading its result: %w", tool, err)
	}
	return nil
}
