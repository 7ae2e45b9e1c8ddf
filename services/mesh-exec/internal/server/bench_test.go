package server_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkMeshExecuteOverhead runs the same one-turn task with the fake
// claude directly (process start, stream, exit) and through mesh_execute over
// stdio (MCP round trip, session bookkeeping, the runner), alternating the two
// in one run, and reports what mesh-exec adds. Goal: under 10 ms.
func BenchmarkMeshExecuteOverhead(b *testing.B) {
	e := newEnv(b)
	cs, _ := e.stdio(b, nil, nil)
	repo := filepath.Join(e.root, "bench")
	execute(b, cs, map[string]any{"repository": "bench", "task": "warm up"})
	var direct, mesh time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		cmd := exec.Command(bins.claude, "-p", "--output-format", "stream-json", "--verbose", "--", "hello")
		cmd.Dir, cmd.Env = repo, e.environ()
		if out, err := cmd.Output(); err != nil || len(out) == 0 {
			b.Fatalf("direct run: %v", err)
		}
		direct += time.Since(start)

		start = time.Now()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "mesh_execute", Arguments: map[string]any{"repository": "bench", "task": "hello"}})
		if err != nil || res.IsError {
			b.Fatalf("mesh_execute: %v %+v", err, res)
		}
		mesh += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Microseconds())/n/1000, "direct-ms")
	b.ReportMetric(float64(mesh.Microseconds())/n/1000, "mesh-ms")
	b.ReportMetric(float64((mesh-direct).Microseconds())/n/1000, "added-ms")
	b.ReportMetric(float64(mesh)/float64(direct), "ratio")
}
