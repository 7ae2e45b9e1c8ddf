package bearer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
)

func TestNew(t *testing.T) {
	t.Parallel()
	for _, bad := range []map[string]string{
		{"alice": "short"},
		{"": "a-long-enough-token-1"},
		{"a b": "a-long-enough-token-1"},
		{"a=b": "a-long-enough-token-1"},
		{"alice": "a-long-enough token-1"},
		{"alice": "a-long-enough-token-1", "bob": "a-long-enough-token-1"},
	} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%v) accepted", bad)
		}
	}
	tokens, err := New(map[string]string{"alice": aliceToken, "bob": bobToken})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tokens.entries {
		if strings.Contains(fmt.Sprintf("%+v", e), "token-0123") {
			t.Fatal("a token is kept in the clear")
		}
	}
	if c, ok := tokens.Caller(bobToken); !ok || c != "bob" {
		t.Errorf("Caller(bob's) = %q, %v", c, ok)
	}
	for _, unknown := range []string{"", aliceToken + "x", strings.ToUpper(aliceToken)} {
		if _, ok := tokens.Caller(unknown); ok {
			t.Errorf("Caller(%q) was accepted", unknown)
		}
	}
	if c, h, ok := tokens.Lookup(aliceToken); !ok || c != "alice" || string(h) != string(Hash(aliceToken)) {
		t.Errorf("Lookup(alice's) = %q %x, %v", c, h, ok)
	}
	if !tokens.Has("alice") || tokens.Has("carol") {
		t.Error("Has does not tell a caller with a token from one without")
	}
	var nilSet *Set
	if _, ok := nilSet.Caller(aliceToken); ok || nilSet.Len() != 0 || nilSet.Has("alice") {
		t.Error("a nil set accepted a token")
	}
}

// One format everywhere: caller=token pairs in the environment, "caller
// token" or "caller=token" lines in the file; errors name the entry or
// line and never the token.
func TestLoad(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("# callers\ncarol carol-token-0123456789\n\n  dave=dave-token-0123456789  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := Load("MESHWORK_TOKENS", "alice="+aliceToken+", bob="+bobToken+",", file)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"alice": aliceToken, "bob": bobToken, "carol": "carol-token-0123456789", "dave": "dave-token-0123456789"}
	if set.Len() != len(want) {
		t.Errorf("Len() = %d, want %d", set.Len(), len(want))
	}
	for caller, token := range want {
		if c, ok := set.Caller(token); !ok || c != caller {
			t.Errorf("Caller(%s's) = %q, %v", caller, c, ok)
		}
	}
	var order []string
	for caller, hash := range set.All() {
		order = append(order, caller)
		if string(hash) != string(Hash(want[caller])) {
			t.Errorf("%s: the hash is not the token's", caller)
		}
	}
	if strings.Join(order, ",") != "alice,bob,carol,dave" {
		t.Errorf("Each order: %v", order)
	}

	for _, tc := range []struct{ env, file, want string }{
		{env: "alice", want: "MESHWORK_TOKENS entry 1: want caller=token"},
		{env: "alice=" + aliceToken + ",=x-long-enough-token", want: "MESHWORK_TOKENS entry 2: the caller must be"},
		{env: "alice=short", want: "at least 16 characters"},
		{env: "x:" + aliceToken + "=" + bobToken, want: "MESHWORK_TOKENS entry 1: the caller must be"},
		{env: "alice=" + aliceToken + ",bob=" + aliceToken, want: "callers alice and bob have the same token"},
		{file: "carol a b\n", want: `tokens:1: want "caller token" or "caller=token"`},
		{env: "carol=" + aliceToken, file: "# x\nbob " + aliceToken + "\n", want: "tokens:2: callers carol and bob have the same token"},
	} {
		path := ""
		if tc.file != "" {
			path = filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Load("MESHWORK_TOKENS", tc.env, path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q, %q) = %v, want an error with %q", tc.env, tc.file, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), aliceToken) || strings.Contains(err.Error(), bobToken)) {
			t.Errorf("the error shows a token: %v", err)
		}
	}
	// A caller with two tokens (rotation); a token with "=" on a "caller
	// token" line.
	rotated := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(rotated, []byte("alice "+aliceToken+"\nalice c2VjcmV0LXRva2VuLWZvci1hbGljZQ==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err = Load("X", "", rotated)
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{aliceToken, "c2VjcmV0LXRva2VuLWZvci1hbGljZQ=="} {
		if c, ok := set.Caller(token); !ok || c != "alice" {
			t.Errorf("alice's token %q: %q, %v", token, c, ok)
		}
	}
	if _, err := Load("X", "", filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "reading the tokens file") {
		t.Errorf("a missing file: %v", err)
	}
}
