package journeys

import (
	"slices"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/workerdef"
)

// A builtin worker's meshworker gets the definition's limits and path
// globs, so it can check the globs on the paths links resolve to.
func TestServerArgvBuiltin(t *testing.T) {
	t.Parallel()
	e := &workerdef.Entry{Definition: meshtype.Definition{
		ID:    "fs_v1",
		Kind:  meshtype.KindBuiltin,
		Tools: []string{"read", "exec"},
		Constraints: meshtype.Constraints{
			MaxFileSize:   1000,
			Readonly:      true,
			ActionTimeout: meshtype.Duration(10 * time.Minute),
			AllowedPaths:  []string{"src/**", "-odd"},
			DeniedPaths:   []string{"**/.env", ".git/**"},
		},
	}}
	want := []string{
		MeshworkerPath, "serve", "--root", "/workspace", "--exec-timeout", "10m0s", "--max-file-size", "1000", "--readonly", "--allow-exec",
		"--allowed-path=src/**", "--allowed-path=-odd", "--denied-path=**/.env", "--denied-path=.git/**",
	}
	if got := serverArgv(e); !slices.Equal(got, want) {
		t.Errorf("argv = %q\nwant   %q", got, want)
	}
	e.Definition.Constraints = meshtype.Constraints{}
	e.Definition.Tools = nil
	if got, want := serverArgv(e), []string{MeshworkerPath, "serve", "--root", "/workspace"}; !slices.Equal(got, want) {
		t.Errorf("argv without constraints = %q, want %q", got, want)
	}
}
