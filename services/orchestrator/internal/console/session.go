package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/meshwork/meshwork/pkg/bearer"
)

// cookieName is the console's session cookie.
const cookieName = "meshwork_session"

// sessionTTL is how long a sign-in lasts.
const sessionTTL = 12 * time.Hour

// session is a signed-in caller. Its cookie is "caller.expiry.token.mac",
// the caller base64url-encoded (a caller's name may hold dots) and token
// the id of the token signed in with. The MAC is keyed by that token's
// session key (derived from its hash), so any replica with the same tokens
// checks it, nothing is stored, and removing or changing a token ends the
// sessions opened with it, whatever other tokens its caller has.
type session struct {
	caller  string
	expires time.Time
	tokenID string
	key     []byte
}

func (s session) payload() string {
	return base64.RawURLEncoding.EncodeToString([]byte(s.caller)) + "." + strconv.FormatInt(s.expires.Unix(), 10) + "." + s.tokenID
}

func (s session) mac(purpose string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(purpose + "\x00" + s.payload()))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s session) cookieValue() string { return s.payload() + "." + s.mac("session") }

// csrf is the token every form of the session carries.
func (s session) csrf() string { return s.mac("csrf") }

// checkCSRF reports whether a form's token is the session's.
func (s session) checkCSRF(token string) bool {
	return hmac.Equal([]byte(token), []byte(s.csrf()))
}

// newSession is a session of caller, signed in with the token whose hash
// is tokenHash, from now.
func newSession(caller string, tokenHash []byte, now time.Time) session {
	return session{caller: caller, expires: now.Add(sessionTTL), tokenID: tokenID(tokenHash), key: signingKey(tokenHash)}
}

// tokenID names a token in a cookie without giving away its hash.
func tokenID(tokenHash []byte) string {
	h := sha256.Sum256(append([]byte("meshwork console token id\x00"), tokenHash...))
	return base64.RawURLEncoding.EncodeToString(h[:9])
}

// signingKey is the session key of a token: derived from its hash, so that
// every replica with the same tokens accepts a session, and a changed
// token ends its sessions.
func signingKey(tokenHash []byte) []byte {
	k := sha256.Sum256(append([]byte("meshwork console session\x00"), tokenHash...))
	return k[:]
}

// parseSession checks a cookie value against tokens.
func parseSession(value string, tokens *bearer.Set, now time.Time) (session, bool) {
	parts := strings.Split(value, ".")
	if len(parts) != 4 {
		return session{}, false
	}
	caller, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return session{}, false
	}
	unix, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return session{}, false
	}
	s := session{caller: string(caller), expires: time.Unix(unix, 0), tokenID: parts[2]}
	for c, hash := range tokens.All() {
		if c == s.caller && tokenID(hash) == s.tokenID {
			s.key = signingKey(hash)
			break
		}
	}
	if s.key == nil || !hmac.Equal([]byte(parts[3]), []byte(s.mac("session"))) || !now.Before(s.expires) {
		return session{}, false
	}
	return s, true
}

// cookie is one of the console's cookies, with its flags: HttpOnly,
// SameSite=Strict, and Secure when the console is served over TLS (here,
// or by a proxy in front, as Config.SecureCookies says).
func (c *console) cookie(r *http.Request, name, path string) *http.Cookie {
	return &http.Cookie{
		Name: name, Path: path, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: c.cfg.SecureCookies || r.TLS != nil,
	}
}

// setSession gives the browser the session, or (s zero) ends it.
func (c *console) setSession(w http.ResponseWriter, r *http.Request, s session) {
	ck := c.cookie(r, cookieName, "/")
	if s.caller == "" {
		ck.MaxAge = -1
	} else {
		ck.Value, ck.Expires = s.cookieValue(), s.expires
	}
	http.SetCookie(w, ck)
}
