package meshapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

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

// Delegating returns base, except that a call by one of delegates that
// names another caller under OnBehalfOfMetaKey is that caller's. A call by
// anyone else that names a caller is refused rather than served as its
// sender's, so a mistaken client learns it at once.
func Delegating(base CallerFunc, delegates []string) CallerFunc {
	delegates = slices.Clone(delegates)
	return func(req *mcp.CallToolRequest) (string, error) {
		who, err := base(req)
		if err != nil {
			return "", err
		}
		var meta map[string]any
		if req.Params != nil {
			meta = req.Params.Meta
		}
		v, named := meta[OnBehalfOfMetaKey]
		if !named {
			return who, nil
		}
		if !slices.Contains(delegates, who) {
			return "", fmt.Errorf("caller %s may not act on behalf of another caller (the marketplace's delegates setting names who may)", who)
		}
		name, ok := v.(string)
		if !ok || !bearer.ValidCaller(name) {
			b, _ := json.Marshal(v)
			return "", fmt.Errorf("_meta %q is not a caller's name: %.64s", OnBehalfOfMetaKey, b)
		}
		return name, nil
	}
}
