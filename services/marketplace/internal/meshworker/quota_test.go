package meshworker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

func TestWorkspaceQuotaRefusesWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{MaxWorkspaceBytes: 1000, MaxWorkspaceFiles: 3})
	var w writeResult
	b.ok(t, "write", map[string]any{"path": "a.txt", "content": strings.Repeat("a", 600)}, &w)
	msg := b.fails(t, "write", map[string]any{"path": "b.txt", "content": strings.Repeat("b", 600)}, "over its quota of 1000 bytes")
	if _, err := os.Stat(filepath.Join(b.root, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("the refused write left b.txt behind (%v); error was %q", err, msg)
	}
	// Replacing a file counts its old size out.
	b.ok(t, "write", map[string]any{"path": "a.txt", "content": strings.Repeat("a", 900)}, &w)
	// Files count too: a.txt, c, d, then e is the fourth.
	b.ok(t, "write", map[string]any{"path": "c", "content": "c"}, &w)
	b.ok(t, "write", map[string]any{"path": "d", "content": "d"}, &w)
	b.fails(t, "write", map[string]any{"path": "e", "content": "e"}, "over its quota of 3 files")
	// Deleting frees room.
	b.ok(t, "delete", map[string]any{"path": "d"}, &struct{}{})
	b.ok(t, "write", map[string]any{"path": "e", "content": "e"}, &w)
}

func TestWorkspaceQuotaStopsACommand(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{AllowExec: true, MaxWorkspaceBytes: 1 << 20})
	var r execResult
	// Writes a MiB a round, without end: only the quota stops it.
	b.ok(t, "exec", map[string]any{"command": []string{"sh", "-c", "i=0; while :; do i=$((i+1)); head -c 1048576 /dev/zero >fill$i; sleep 0.05; done"}}, &r)
	if r.QuotaExceeded == "" || !strings.Contains(r.QuotaExceeded, "over its quota of 1048576 bytes") {
		t.Fatalf("quota_exceeded %q, want the reason; result %+v", r.QuotaExceeded, r)
	}
	if r.ExitCode != 128+9 || r.TimedOut {
		t.Errorf("exit %d, timed out %t: want killed (137) by the quota, not the timeout", r.ExitCode, r.TimedOut)
	}
	// Over the quota, writes and commands are refused until files go.
	b.fails(t, "write", map[string]any{"path": "x", "content": "x"}, "over its quota")
	b.fails(t, "exec", map[string]any{"command": []string{"true"}}, "exec refused: the workspace holds")
	entries, err := os.ReadDir(b.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b.ok(t, "delete", map[string]any{"path": e.Name()}, &struct{}{})
	}
	var after execResult
	b.ok(t, "exec", map[string]any{"command": []string{"true"}}, &after)
	if after.QuotaExceeded != "" {
		t.Errorf("quota_exceeded %q after the files were deleted", after.QuotaExceeded)
	}
}
