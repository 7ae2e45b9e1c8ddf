package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cookieName is the console's session cookie.
const cookieName = "meshwork_session"

// sessionTTL is how long a sign-in lasts.
const sessionTTL = 12 * time.Hour

// session is a signed-in caller. Its cookie is "caller.expiry.mac": the MAC
// is keyed by the caller's session key (derived from the hash of their
// token), so any replica with the same tokens checks it, nothing is stored,
// and a new token ends the old sessions.
type session struct {
	caller  string
	expires time.Time
	key     []byte
}

func (s session) payload() string {
	return s.caller + "." + strconv.FormatInt(s.expires.Unix(), 10)
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

// parseSession checks a cookie value with keyOf.
func parseSession(value string, keyOf func(caller string) ([]byte, bool), now time.Time) (session, bool) {
	parts := strings.Split(value, ".")
	if len(parts) != 3 {
		return session{}, false
	}
	unix, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return session{}, false
	}
	key, ok := keyOf(parts[0])
	if !ok {
		return session{}, false
	}
	s := session{caller: parts[0], expires: time.Unix(unix, 0), key: key}
	if !hmac.Equal([]byte(parts[2]), []byte(s.mac("session"))) || !now.Before(s.expires) {
		return session{}, false
	}
	return s, true
}

// setCookie gives the browser the session, or (s zero) ends it.
func setCookie(w http.ResponseWriter, r *http.Request, s session) {
	c := &http.Cookie{
		Name: cookieName, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil,
	}
	if s.caller == "" {
		c.MaxAge = -1
	} else {
		c.Value, c.Expires = s.cookieValue(), s.expires
	}
	http.SetCookie(w, c)
}
