package mcpserver_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkSpawnVsDockerRun times spawn_worker over MCP HTTP against a raw
// `docker run -d` of the same image with the same hardening, alternating the
// two in one run so both see the same machine. Removal is not timed.
func BenchmarkSpawnVsDockerRun(b *testing.B) {
	bb := setup(b)
	cs := bb.client(b, aliceToken)
	label := "meshwork.test=" + bb.labels["meshwork.test"]
	var spawn, run time.Duration
	for i := range b.N {
		id := "bench-" + strconv.Itoa(i)
		start := time.Now()
		must(b, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": id})
		spawn += time.Since(start)
		b.StopTimer()
		must(b, cs, "stop_worker", map[string]any{"journey_id": id, "workspace": "delete"})
		b.StartTimer()

		start = time.Now()
		out, err := exec.Command("docker", "run", "-d", "--label", label, "--init", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges:true", "--read-only", "--tmpfs", "/tmp", "--network", "none",
			"--user", "65532:65532", "--cpus", "0.5", "--memory", "256m", "--pids-limit", "128",
			"-v", "/workspace", "meshwork/worker:latest", "idle").Output()
		if err != nil {
			b.Fatalf("docker run: %v", err)
		}
		run += time.Since(start)
		b.StopTimer()
		_ = exec.Command("docker", "rm", "-fv", strings.TrimSpace(string(out))).Run()
		b.StartTimer()
	}
	b.ReportMetric(float64(spawn.Milliseconds())/float64(b.N), "spawn-ms")
	b.ReportMetric(float64(run.Milliseconds())/float64(b.N), "docker-run-ms")
	b.ReportMetric(float64(spawn)/float64(run), "ratio")
}

// BenchmarkExecuteRead1KBVsDockerExec times execute_in_worker reading a 1 KB
// file over MCP HTTP (gate, audit row and the kept-open worker channel
// included) against `docker exec` of a one-shot read of the same file in the
// same container.
func BenchmarkExecuteRead1KBVsDockerExec(b *testing.B) {
	bb := setup(b)
	cs := bb.client(b, aliceToken)
	sp := must(b, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "read"})
	must(b, cs, "execute_in_worker", execArgs("read", map[string]any{"type": "write", "target": "1k.txt", "content": strings.Repeat("k", 1024)}))
	must(b, cs, "execute_in_worker", execArgs("read", map[string]any{"type": "read", "target": "1k.txt"})) // opens the channel
	container := sp["container_id"].(string)
	var mcpT, execT time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		must(b, cs, "execute_in_worker", execArgs("read", map[string]any{"type": "read", "target": "1k.txt"}))
		mcpT += time.Since(start)
		start = time.Now()
		out, err := exec.Command("docker", "exec", container, "/usr/local/bin/app", "cat", "1k.txt").Output()
		if err != nil || len(out) != 1024 {
			b.Fatalf("docker exec cat: %v (%d bytes)", err, len(out))
		}
		execT += time.Since(start)
	}
	b.ReportMetric(float64(mcpT.Microseconds())/float64(b.N)/1000, "mcp-read-ms")
	b.ReportMetric(float64(execT.Microseconds())/float64(b.N)/1000, "docker-exec-ms")
	b.ReportMetric(float64(mcpT)/float64(execT), "ratio")
}

// BenchmarkTwentyJourneys spawns 20 journeys at once, uses each (a write and
// a read), and reports the wall time and the memory of an idle worker.
func BenchmarkTwentyJourneys(b *testing.B) {
	bb := setup(b)
	cs := bb.client(b, aliceToken)
	const n = 20
	for i := range b.N {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for j := range n {
			wg.Go(func() {
				id := fmt.Sprintf("j%d-%d", i, j)
				for _, call := range []struct {
					tool string
					args map[string]any
				}{
					{"spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": id}},
					{"execute_in_worker", execArgs(id, map[string]any{"type": "write", "target": "f.txt", "content": id})},
					{"execute_in_worker", execArgs(id, map[string]any{"type": "read", "target": "f.txt"})},
				} {
					res, err := cs.CallTool(context.Background(), toolParams(call.tool, call.args))
					if err != nil || res.IsError {
						errs <- fmt.Errorf("%s %s: %w (result %v)", call.tool, id, err, res)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "wall-ms/20")
		b.StopTimer()
		b.ReportMetric(idleMemoryMiB(b, bb.labels["meshwork.test"]), "idle-MiB/worker")
		for j := range n {
			must(b, cs, "stop_worker", map[string]any{"journey_id": fmt.Sprintf("j%d-%d", i, j), "workspace": "delete"})
		}
		b.StartTimer()
	}
}

// idleMemoryMiB is the median memory use of the labelled containers.
func idleMemoryMiB(b *testing.B, label string) float64 {
	b.Helper()
	ids, _ := exec.Command("docker", "ps", "-q", "--filter", "label=meshwork.test="+label).Output()
	args := append([]string{"stats", "--no-stream", "--format", "{{.MemUsage}}"}, strings.Fields(string(ids))...)
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		b.Fatalf("docker stats: %v", err)
	}
	var mibs []float64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		used, _, _ := strings.Cut(line, " / ")
		mibs = append(mibs, parseMiB(used))
	}
	slices.Sort(mibs)
	return mibs[len(mibs)/2]
}

func parseMiB(s string) float64 {
	s = strings.TrimSpace(s)
	for unit, f := range map[string]float64{"GiB": 1024, "MiB": 1, "KiB": 1.0 / 1024, "B": 1.0 / (1 << 20)} {
		if v, ok := strings.CutSuffix(s, unit); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return x * f
			}
		}
	}
	return 0
}
