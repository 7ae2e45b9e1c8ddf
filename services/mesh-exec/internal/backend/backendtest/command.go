package backendtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// CheckCommand is the check of one row of a backend's table of command
// lines: b.Command(req) must return want when wantErr is "", and otherwise
// refuse req with an error whose text contains wantErr. It returns that
// error, for the caller's checks of its class.
func CheckCommand(t *testing.T, b backend.Backend, req backend.Request, want []string, wantErr string) error {
	t.Helper()
	got, err := b.Command(req)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("Command() error = %v, want one containing %q (argv %q)", err, wantErr, got)
		}
		return err
	}
	if err != nil {
		t.Fatalf("Command() error = %v", err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Command() =\n%q\nwant\n%q", got, want)
	}
	return nil
}
