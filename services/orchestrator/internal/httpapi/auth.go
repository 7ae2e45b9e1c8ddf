package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
)

type callerKey struct{}

// callerFrom returns the authenticated caller of a request.
func callerFrom(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(string)
	return c
}

// authenticate lets through requests with a known caller's bearer token and
// refuses the others with 401.
func (a *API) authenticate(next http.Handler) http.Handler { return a.authenticateWith(next, false) }

// authenticateOrSession is authenticate that also takes a console session
// (Config.SessionCaller) from a request without a token. It is put on the
// one route that may, after routing (chi's With), so that no other path
// can reach it, however the path is spelled.
func (a *API) authenticateOrSession(next http.Handler) http.Handler {
	return a.authenticateWith(next, a.session != nil)
}

func (a *API) authenticateWith(next http.Handler, orSession bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		caller, ok := "", false
		if strings.EqualFold(scheme, "Bearer") {
			caller, ok = a.tokens.Caller(strings.TrimSpace(token))
		} else if orSession {
			caller, ok = a.session(r)
		}
		if !ok {
			challenge := `Bearer realm="meshwork-orchestrator"`
			if token != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, meshapi.CodeUnauthenticated, bearer.ErrRequired.Error())
			return
		}
		if info, _ := r.Context().Value(requestInfoKey{}).(*requestInfo); info != nil {
			info.caller = caller
		}
		ctx := engine.WithViewer(context.WithValue(r.Context(), callerKey{}, caller), engine.Viewer{Caller: caller, Admin: a.admins[caller]})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
