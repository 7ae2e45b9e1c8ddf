package meshapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/bearer"
)

// CallerFunc names the caller of a tool call: the bearer token's identity
// over HTTP (TokenCaller), a fixed name over stdio (FixedCaller).
type CallerFunc func(req *mcp.CallToolRequest) (string, error)

// FixedCaller is the CallerFunc of a single-client transport (stdio).
func FixedCaller(name string) CallerFunc {
	return func(*mcp.CallToolRequest) (string, error) { return name, nil }
}

// TokenCaller reads the caller from the bearer token the HTTP middleware
// verified.
func TokenCaller(req *mcp.CallToolRequest) (string, error) {
	if req.Extra == nil || req.Extra.TokenInfo == nil || req.Extra.TokenInfo.UserID == "" {
		return "", errors.New("unauthenticated request")
	}
	return req.Extra.TokenInfo.UserID, nil
}

// OnBehalfOfMetaKey is the _meta key of a tool call a delegate makes for
// another caller: the orchestrator's console shows a signed-in person their
// own journeys, as the marketplace would show them to that person.
const OnBehalfOfMetaKey = "meshwork/on_behalf_of"

// DelegableTools are the tools a delegate may call for another caller:
// what the console shows of a journey and its stop. Spawning and running
// actions stay with the callers themselves, so their quotas and audit rows
// are theirs.
var DelegableTools = []string{ToolListJourneys, ToolGetWorkerState, ToolJourneyAudit, ToolStopWorker}

// Delegating returns base, except that a call by one of delegates that
// names another caller under OnBehalfOfMetaKey is that caller's. It is
// refused, rather than served as its sender's, when its sender is no
// delegate, the tool is not one of DelegableTools, or the name is not a
// caller's name without a "/": a delegate acts for a person, never for
// another delegate or for an agent's nested caller ("<caller>/…"). The
// name is taken on the delegate's word (it need not hold a token here): a
// delegate is trusted with every caller's journeys.
func Delegating(base CallerFunc, delegates []string) CallerFunc {
	delegates = slices.Clone(delegates)
	return func(req *mcp.CallToolRequest) (string, error) {
		who, err := base(req)
		if err != nil {
			return "", err
		}
		var meta map[string]any
		tool := ""
		if req.Params != nil {
			meta, tool = req.Params.Meta, req.Params.Name
		}
		v, named := meta[OnBehalfOfMetaKey]
		if !named {
			return who, nil
		}
		if !slices.Contains(delegates, who) {
			return "", fmt.Errorf("caller %s may not act on behalf of another caller (the marketplace's delegates setting names who may)", who)
		}
		if !slices.Contains(DelegableTools, tool) {
			return "", fmt.Errorf("a delegate may call only %s on behalf of another caller, not %s", strings.Join(DelegableTools, ", "), tool)
		}
		name, ok := v.(string)
		if !ok || !bearer.ValidCaller(name) || strings.Contains(name, "/") || slices.Contains(delegates, name) {
			b, _ := json.Marshal(v)
			return "", fmt.Errorf("_meta %q is not a caller a delegate may act for: %.64s", OnBehalfOfMetaKey, b)
		}
		return name, nil
	}
}
