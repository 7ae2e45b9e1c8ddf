package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/bearer"
)

// A redirect after sign-in stays on the console, whatever a browser makes
// of the path: it drops tabs and newlines and reads a backslash as a slash.
func TestSafeNext(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"/runs/r-1?patch=implement#patch": "/runs/r-1?patch=implement#patch",
		"/approvals":                      "/approvals",
		"":                                "/runs",
		"runs":                            "/runs",
		"//evil.example":                  "/runs",
		"/\t/evil.example":                "/runs",
		"/\n/evil.example":                "/runs",
		"/\\evil.example":                 "/runs",
		"/\x7f/evil.example":              "/runs",
		"https://evil.example/runs":       "/runs",
		"/%zz":                            "/runs",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func tokenSet(t *testing.T, tokens map[string][]string) *bearer.Set {
	t.Helper()
	var pairs []string
	for caller, ts := range tokens {
		for _, tok := range ts {
			pairs = append(pairs, caller+"="+tok)
		}
	}
	s, err := bearer.Load("TOKENS", strings.Join(pairs, ","), "")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A session is checked against the token it was opened with: a caller with
// a dot in their name stays signed in, and removing one of a caller's
// tokens ends the sessions opened with it, not those of their other token.
func TestSessionIsTheTokens(t *testing.T) {
	t.Parallel()
	const a, b = "j.doe-first-token-0123", "j.doe-second-token-0123"
	both := tokenSet(t, map[string][]string{"j.doe": {a, b}})
	now := time.Now()
	open := func(token string) string {
		t.Helper()
		caller, hash, ok := both.Lookup(token)
		if !ok || caller != "j.doe" {
			t.Fatalf("Lookup(%q) = %q %v", token, caller, ok)
		}
		return newSession(caller, hash, now).cookieValue()
	}
	withA, withB := open(a), open(b)
	for name, v := range map[string]string{"first": withA, "second": withB} {
		if s, ok := parseSession(v, both, now); !ok || s.caller != "j.doe" {
			t.Errorf("the %s token's session: %q %v, want j.doe's", name, s.caller, ok)
		}
	}
	onlyA := tokenSet(t, map[string][]string{"j.doe": {a}})
	if _, ok := parseSession(withB, onlyA, now); ok {
		t.Error("a session of a removed token is still accepted")
	}
	if _, ok := parseSession(withA, onlyA, now); !ok {
		t.Error("a session of the token kept was ended")
	}
	if _, ok := parseSession(withA, both, now.Add(sessionTTL)); ok {
		t.Error("an expired session is accepted")
	}
	other := tokenSet(t, map[string][]string{"j.doe": {a}, "mallory": {"mallory-token-0123456789"}})
	forged := strings.Replace(withA, "ai5kb2U", "bWFsbG9yeQ", 1) // base64url of j.doe, mallory
	if forged == withA {
		t.Fatal("the test's cookie does not hold the caller as expected")
	}
	if _, ok := parseSession(forged, other, now); ok {
		t.Error("a session with another caller's name put in is accepted")
	}
}

// Cookies are Secure when the console is served over TLS, by itself or,
// as SecureCookies says, by a proxy in front.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	for _, secure := range []bool{false, true} {
		c := &console{cfg: Config{SecureCookies: secure}}
		rec := httptest.NewRecorder()
		c.setSession(rec, httptest.NewRequest(http.MethodPost, "/signin", nil), newSession("alice", []byte("hash"), time.Now()))
		if got := strings.Contains(rec.Header().Get("Set-Cookie"), "; Secure"); got != secure {
			t.Errorf("SecureCookies %v: cookie %q", secure, rec.Header().Get("Set-Cookie"))
		}
	}
}
