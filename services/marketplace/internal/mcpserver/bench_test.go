package mcpserver_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/runtimetest"
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
		cid := dockerRun(b, label)
		run += time.Since(start)
		b.StopTimer()
		_ = exec.Command("docker", "rm", "-fv", cid).Run()
		b.StartTimer()
	}
	b.ReportMetric(float64(spawn.Milliseconds())/float64(b.N), "spawn-ms")
	b.ReportMetric(float64(run.Milliseconds())/float64(b.N), "docker-run-ms")
	b.ReportMetric(float64(spawn)/float64(run), "ratio")
}

// dockerRun starts the baseline of the spawn benchmarks: `docker run -d` of
// the worker image with the hardening a spawn of filesystem_write_v1 gets
// (its limits are the definitions' defaults), labelled for the cleanup. It
// returns the container's id.
func dockerRun(b *testing.B, label string) string {
	b.Helper()
	out, err := exec.Command("docker", "run", "-d", "--label", label, "--init", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges:true", "--read-only", "--tmpfs", "/tmp", "--network", "none",
		"--user", "65532:65532", "--cpus", "1", "--memory", "512m", "--pids-limit", "256",
		"-v", "/workspace", "meshwork/worker:latest", "idle").Output()
	if err != nil {
		b.Fatalf("docker run: %v", err)
	}
	return strings.TrimSpace(string(out))
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

// benchPath is the path of file i of a generated repository: 50 files in
// each of 100 directories for 5,000 files.
func benchPath(i int) string { return fmt.Sprintf("pkg%02d/file%04d.txt", i%100, i) }

// benchRepo writes n files, content(i) each, into root/checkout (a plain
// tree, no .git) and commits them into the bare repository root/repo.git
// with the real git. It returns both paths.
func benchRepo(b *testing.B, root string, n int, content func(i int) []byte) (repo, checkout string) {
	b.Helper()
	repo, checkout = filepath.Join(root, "repo.git"), filepath.Join(root, "checkout")
	for i := range n {
		p := filepath.Join(checkout, benchPath(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, content(i), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	gittest.Run(b, root, "init", "-q", "--bare", "-b", "main", repo)
	gittest.Run(b, root, "--git-dir", repo, "--work-tree", checkout, "add", "-A")
	gittest.Run(b, root, "--git-dir", repo, "--work-tree", checkout, "commit", "-q", "-m", "base")
	return repo, checkout
}

// randomText is size bytes of deterministic, barely compressible text
// (base64 of a ChaCha8 stream seeded by i, in lines of 80).
func randomText(i, size int) []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], uint64(i))
	raw := make([]byte, size*3/4+3)
	_, _ = rand.NewChaCha8(seed).Read(raw)
	text := []byte(base64.StdEncoding.EncodeToString(raw))[:size]
	for j := 80; j < len(text); j += 81 {
		text[j] = '\n'
	}
	text[len(text)-1] = '\n'
	return text
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(k, 0)]
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkSpawnWithGitSource times spawn_worker of a 50 MB, 5,000-file local
// git repository (fetched with go-git, recorded as the base, copied into the
// workspace) against `docker run -d` of the same image with the same
// hardening plus `docker cp` of a checkout of the same tree into its
// /workspace. The two alternate which goes first, in one run; removal is
// not timed.
func BenchmarkSpawnWithGitSource(b *testing.B) {
	const files, size = 5000, 10 << 10
	root := b.TempDir()
	repo, checkout := benchRepo(b, root, files, func(i int) []byte { return randomText(i, size) })
	bb := &bundle{sources: source.Policy{Roots: []string{root}}}
	if err := bb.sources.CheckRoots(); err != nil {
		b.Fatal(err)
	}
	bb = setupWith(b, bb)
	cs := bb.client(b, aliceToken)
	label := "meshwork.test=" + bb.labels["meshwork.test"]

	spawn := func(i int) time.Duration {
		id := "git-" + strconv.Itoa(i)
		start := time.Now()
		out := must(b, cs, "spawn_worker", map[string]any{
			"worker_id": "filesystem_write_v1", "journey_id": id,
			"source": map[string]any{"git": map[string]any{"url": repo}},
		})
		d := time.Since(start)
		b.StopTimer()
		if src, _ := out["source"].(map[string]any); src["files"] != float64(files) || src["bytes"] != float64(files*size) {
			b.Fatalf("spawn source %v, want %d files of %d bytes", out["source"], files, size)
		}
		must(b, cs, "stop_worker", map[string]any{"journey_id": id, "workspace": "delete"})
		b.StartTimer()
		return d
	}
	runCp := func() time.Duration {
		start := time.Now()
		id := dockerRun(b, label)
		if out, err := exec.Command("docker", "cp", checkout+"/.", id+":/workspace").CombinedOutput(); err != nil {
			b.Fatalf("docker cp: %v\n%s", err, out)
		}
		d := time.Since(start)
		b.StopTimer()
		_ = exec.Command("docker", "rm", "-fv", id).Run()
		b.StartTimer()
		return d
	}

	var spawns, runs []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			spawns = append(spawns, spawn(i))
			runs = append(runs, runCp())
		} else {
			runs = append(runs, runCp())
			spawns = append(spawns, spawn(i))
		}
	}
	s, r := percentile(spawns, 50), percentile(runs, 50)
	b.ReportMetric(millis(s), "spawn-p50-ms")
	b.ReportMetric(millis(r), "run+cp-p50-ms")
	b.ReportMetric(float64(s)/float64(r), "ratio")
}

// BenchmarkWorkspaceDiff times workspace_diff over MCP HTTP of a journey
// seeded from a 5,000-file repository (1-2 KB of text each) with 10 files
// changed by write actions: the engine's export of the workspace, the
// comparison with the base, the result gate and the audit row. The goal is
// a p50 under 200 ms.
func BenchmarkWorkspaceDiff(b *testing.B) {
	const files, changed = 5000, 10
	content := func(i int) []byte { return randomText(i, 1024+i%1024) }
	root := b.TempDir()
	repo, _ := benchRepo(b, root, files, content)
	bb := &bundle{sources: source.Policy{Roots: []string{root}}}
	if err := bb.sources.CheckRoots(); err != nil {
		b.Fatal(err)
	}
	bb = setupWith(b, bb)
	cs := bb.client(b, aliceToken)
	must(b, cs, "spawn_worker", map[string]any{
		"worker_id": "filesystem_write_v1", "journey_id": "diff",
		"source": map[string]any{"git": map[string]any{"url": repo}},
	})
	for k := range changed {
		i := k * files / changed
		c := content(i)
		copy(c[81:], fmt.Sprintf("changed line %d\n", i)) // the second line, rewritten
		must(b, cs, "execute_in_worker", execArgs("diff", map[string]any{"type": "write", "target": benchPath(i), "content": string(c)}))
	}
	diff := func() time.Duration {
		start := time.Now()
		out := must(b, cs, "workspace_diff", map[string]any{"journey_id": "diff"})
		d := time.Since(start)
		if sum, _ := out["summary"].(map[string]any); sum["modified"] != float64(changed) || sum["files_changed"] != float64(changed) {
			b.Fatalf("diff summary %v, want %d modified files", out["summary"], changed)
		}
		return d
	}
	diff() // warm: the first export after the writes

	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		ds = append(ds, diff())
	}
	b.ReportMetric(millis(percentile(ds, 50)), "p50-ms")
	b.ReportMetric(millis(percentile(ds, 99)), "p99-ms")
}

// BenchmarkGVisorVsRunc times, alternately in one run, spawn_worker and a
// 1 KB read (the worker's channel already open) of filesystem_write_v1
// under gVisor (isolation.runtime: runsc) and under the default runc. It
// needs runsc registered with the engine (deploy/dev/gvisor.sh).
func BenchmarkGVisorVsRunc(b *testing.B) {
	runtimetest.RequireGVisor(b)
	runc := setup(b)
	runsc := setupWith(b, &bundle{adjust: func(d *meshtype.Definition) {
		if d.ID == "filesystem_write_v1" {
			d.Isolation.Runtime = "runsc"
		}
	}})
	type side struct {
		cs          *mcp.ClientSession
		spawn, read time.Duration
		name        string
	}
	sides := []*side{{cs: runc.client(b, aliceToken), name: "runc"}, {cs: runsc.client(b, aliceToken), name: "runsc"}}
	content := strings.Repeat("k", 1024)
	for i := range b.N {
		for _, s := range sides {
			id := "bench-" + s.name + "-" + strconv.Itoa(i)
			start := time.Now()
			must(b, s.cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": id})
			s.spawn += time.Since(start)
			must(b, s.cs, "execute_in_worker", execArgs(id, map[string]any{"type": "write", "target": "1k.txt", "content": content}))
			start = time.Now()
			res := must(b, s.cs, "execute_in_worker", execArgs(id, map[string]any{"type": "read", "target": "1k.txt"}))
			s.read += time.Since(start)
			if readContent(res) != content {
				b.Fatalf("%s read: %v", s.name, res)
			}
			must(b, s.cs, "stop_worker", map[string]any{"journey_id": id, "workspace": "delete"})
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
	b.ReportMetric(ms(sides[1].spawn), "runsc-spawn-ms")
	b.ReportMetric(ms(sides[0].spawn), "runc-spawn-ms")
	b.ReportMetric(float64(sides[1].spawn)/float64(sides[0].spawn), "spawn-ratio")
	b.ReportMetric(ms(sides[1].read), "runsc-read-ms")
	b.ReportMetric(ms(sides[0].read), "runc-read-ms")
	b.ReportMetric(float64(sides[1].read)/float64(sides[0].read), "read-ratio")
}
