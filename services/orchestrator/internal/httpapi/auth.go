package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"

	"github.com/modelcontextprotocol/go-sdk/auth"
)

// MinTokenLength is the shortest bearer token accepted.
const MinTokenLength = 16

// Tokens authenticates callers by bearer token. It keeps only each token's
// SHA-256, and compares a presented token's hash with every known one in
// constant time.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	caller string
	hash   [sha256.Size]byte
}

// NewTokens returns the Tokens of byCaller, caller → token. Callers must be
// non-empty, tokens at least MinTokenLength long and distinct.
func NewTokens(byCaller map[string]string) (*Tokens, error) {
	callers := make([]string, 0, len(byCaller))
	for c := range byCaller {
		callers = append(callers, c)
	}
	sort.Strings(callers)
	t := &Tokens{}
	seen := map[[sha256.Size]byte]string{}
	for _, caller := range callers {
		token := byCaller[caller]
		if strings.TrimSpace(caller) == "" || strings.ContainsAny(caller, " \t\r\n") {
			return nil, fmt.Errorf("caller %q: a caller is a non-empty name without spaces", caller)
		}
		if len(token) < MinTokenLength {
			return nil, fmt.Errorf("caller %s: the token must be at least %d characters", caller, MinTokenLength)
		}
		h := sha256.Sum256([]byte(token))
		if other, dup := seen[h]; dup {
			return nil, fmt.Errorf("callers %s and %s have the same token", other, caller)
		}
		seen[h] = caller
		t.entries = append(t.entries, tokenEntry{caller: caller, hash: h})
	}
	return t, nil
}

// Len returns how many callers have a token.
func (t *Tokens) Len() int { return len(t.entries) }

// Caller returns the caller whose token this is.
func (t *Tokens) Caller(token string) (string, bool) {
	h := sha256.Sum256([]byte(token))
	caller := ""
	for _, e := range t.entries { // no early exit: the time does not depend on which matched
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			caller = e.caller
		}
	}
	return caller, caller != ""
}

// SessionKey is the key of the web console's sessions of caller: derived
// from the hash of the caller's token, so that every replica with the same
// tokens accepts a session, and a changed token ends its sessions.
func (t *Tokens) SessionKey(caller string) ([]byte, bool) {
	for _, e := range t.entries {
		if e.caller == caller {
			k := sha256.Sum256(append([]byte("meshwork console session\x00"), e.hash[:]...))
			return k[:], true
		}
	}
	return nil, false
}

// verify is the MCP SDK's TokenVerifier over t.
func (t *Tokens) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	caller, ok := t.Caller(token)
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	// Tokens do not expire; the SDK wants an expiry, checked per request.
	return &auth.TokenInfo{UserID: caller, Expiration: time.Now().Add(time.Hour)}, nil
}

type callerKey struct{}

// callerFrom returns the authenticated caller of a request.
func callerFrom(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(string)
	return c
}

// errUnauthorized is the message of a refused request.
var errUnauthorized = errors.New("a valid bearer token is required: send Authorization: Bearer <token>")

// authenticate lets through requests with a known caller's bearer token and
// refuses the others with 401.
func (a *API) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		caller, ok := "", false
		if strings.EqualFold(scheme, "Bearer") {
			caller, ok = a.tokens.Caller(strings.TrimSpace(token))
		}
		if !ok {
			challenge := `Bearer realm="meshwork-orchestrator"`
			if token != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, codeUnauthorized, errUnauthorized.Error())
			return
		}
		if info, _ := r.Context().Value(requestInfoKey{}).(*requestInfo); info != nil {
			info.caller = caller
		}
		ctx := engine.WithViewer(context.WithValue(r.Context(), callerKey{}, caller), engine.Viewer{Caller: caller, Admin: a.admins[caller]})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
