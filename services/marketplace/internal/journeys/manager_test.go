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

// A definition's action_timeout bounds its actions: the marketplace waits
// for it and the grace in which the worker answers (an MCP server, told no
// timeout, gets none), and an agent's task runs for it; without one, the
// marketplace's bound holds, and an agent's task leaves the grace in it.
func TestActionTimeouts(t *testing.T) {
	t.Parallel()
	m := &Manager{cfg: Config{ActionTimeout: 5 * time.Minute}}
	for _, tc := range []struct {
		kind          meshtype.Kind
		actionTimeout time.Duration
		wait, task    time.Duration
	}{
		{meshtype.KindBuiltin, 0, 5 * time.Minute, 4*time.Minute + 30*time.Second},
		{meshtype.KindBuiltin, 10 * time.Minute, 10*time.Minute + 30*time.Second, 10 * time.Minute},
		{meshtype.KindAgent, 30 * time.Minute, 30*time.Minute + 30*time.Second, 30 * time.Minute},
		{meshtype.KindMCP, 20 * time.Second, 20 * time.Second, 20 * time.Second},
	} {
		d := &meshtype.Definition{Kind: tc.kind, Constraints: meshtype.Constraints{ActionTimeout: meshtype.Duration(tc.actionTimeout)}}
		task, wait := m.actionTimeouts(d)
		if wait != tc.wait {
			t.Errorf("%s worker, action_timeout %s: the marketplace waits %s, want %s", tc.kind, tc.actionTimeout, wait, tc.wait)
		}
		if task != tc.task {
			t.Errorf("%s worker, action_timeout %s: an agent's task runs %s, want %s", tc.kind, tc.actionTimeout, task, tc.task)
		}
	}
}
