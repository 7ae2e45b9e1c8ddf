package cli

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/source"
)

// A caller that the source credentials name and that cannot call is said
// at start-up, each once; the callers that can call are not.
func TestWarnCredentialCallers(t *testing.T) {
	t.Parallel()
	creds, err := source.ParseCredentials([]byte("git.example.com bot tok alcie,bob\ngit.internal ci tok2 bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	warnCredentialCallers(t.Context(), logger, source.Policy{Credentials: creds}, func(c string) bool { return c == "alice" || c == "bob" })
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "caller=alcie") {
		t.Errorf("logs:\n%s\nwant one warning, for alcie", out)
	}
}
