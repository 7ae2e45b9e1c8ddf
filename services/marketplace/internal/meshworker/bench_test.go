package meshworker_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

// BenchmarkExecQuota is the workspace quota's cost on a command: exec of
// `true` in a workspace of 5,000 files, without a quota (the baseline) and
// with one (measured again when the command ends).
func BenchmarkExecQuota(b *testing.B) {
	files := map[string]string{}
	for i := range 5000 {
		files[filepath.Join(fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%04d.go", i))] = "package p\n"
	}
	for _, c := range []struct {
		name  string
		bytes int64
	}{{"no-quota", -1}, {"quota", 1 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			root := b.TempDir()
			writeFiles(b, root, files)
			w := setup(b, meshworker.Config{Root: root, AllowExec: true, MaxWorkspaceBytes: c.bytes, MaxWorkspaceFiles: -1})
			var r execResult
			for b.Loop() {
				w.ok(b, "exec", map[string]any{"command": []string{"true"}}, &r)
			}
		})
	}
}
