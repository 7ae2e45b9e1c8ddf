package source_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/source"
)

func TestParseCredentials(t *testing.T) {
	got, err := source.ParseCredentials([]byte(`# private hosts
git.example.com bot everyone-token
GIT.example.com:443 bot alice-token alice,bob

git.internal:8443 ci ci-token carol
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]source.Credential{
		"git.example.com": {
			{Username: "bot", Password: "everyone-token"},
			{Username: "bot", Password: "alice-token", Callers: []string{"alice", "bob"}},
		},
		"git.internal:8443": {{Username: "ci", Password: "ci-token", Callers: []string{"carol"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	p := source.Policy{Credentials: got}
	if callers := p.CredentialCallers(); !reflect.DeepEqual(callers, []string{"alice", "bob", "carol"}) {
		t.Errorf("CredentialCallers() = %q, want alice, bob, carol", callers)
	}
	for _, tt := range []struct{ file, want string }{
		{"git.example.com bot", "line 1: want HOST USERNAME PASSWORD [CALLER,CALLER...], got 2 fields"},
		{"h u SECRET a b", "got 5 fields"},
		{"h u SECRET\nh u2 SECRET2", "line 2: host h has a credential for every caller already"},
		{"h u SECRET alice\n\nh u2 SECRET2 bob,alice", "line 3: caller \"alice\" has a credential for h already"},
		{"h u SECRET alice,,bob", `line 1: "" is not a caller's name`},
		{"h u SECRET alice,b\x7fob", `is not a caller's name`},
		{"h u SECRET alice,alice", `line 1: caller "alice" is named twice`},
	} {
		_, err := source.ParseCredentials([]byte(tt.file + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.file, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%q: the error shows the secret: %v", tt.file, err)
		}
	}
}
