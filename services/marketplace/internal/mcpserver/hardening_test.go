package mcpserver_test

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/runtimetest"
)

// The hardening suite: adversarial code run inside a real shell_v1 worker
// through exec (as a repository's own `go test` would run it), and a caller
// pushing the marketplace's limits. Each attack must be refused or bounded;
// the evidence is logged (go test -v shows it). The probe's code is
// testdata/probe/probe_test.go.
func TestHardening(t *testing.T) {
	t.Parallel()
	hardening(t, "")
}

// The same probe with the worker under gVisor (isolation.runtime: runsc).
// It needs runsc registered with the engine (runtimetest.RequireGVisor).
func TestHardeningUnderGVisor(t *testing.T) {
	t.Parallel()
	runtimetest.RequireGVisor(t)
	hardening(t, "runsc")
}

// hardening runs the probe in a shell_v1 worker under the OCI runtime given
// ("" for the engine's default).
func hardening(t *testing.T, ociRuntime string) {
	t.Helper()
	requireImage(t, "meshwork/shell-worker:latest")
	probeSrc, err := os.ReadFile("testdata/probe/probe_test.go")
	if err != nil {
		t.Fatal(err)
	}
	const quota = 256 << 20
	b := setupWith(t, &bundle{maxPerCaller: 10, adjust: func(d *meshtype.Definition) {
		if d.ID == "shell_v1" {
			d.Isolation.Resources.Workspace = quota // small enough to fill quickly
			d.Isolation.Runtime = ociRuntime
		}
	}})
	cs := b.client(t, aliceToken)
	files := map[string]string{
		"go.mod":              "module probe\n\ngo 1.19\n",
		"probe/probe_test.go": string(probeSrc),
		".env":                "SECRET=hunter2\n",
		"docs/long-line.txt":  strings.Repeat("ab", 3<<19) + "\n", // one 3 MiB line
	}
	var entries []*tar.Header
	for _, name := range []string{"go.mod", "probe/probe_test.go", ".env", "docs/long-line.txt"} {
		entries = append(entries, &tar.Header{Name: name, Typeflag: tar.TypeReg})
	}
	b64, sum := tarGz(t, entries, files)
	sp := must(t, cs, "spawn_worker", map[string]any{
		"worker_id": "shell_v1", "journey_id": "probe",
		"source": map[string]any{"archive": map[string]any{"tar_gz_base64": b64, "sha256": sum}},
	})
	container := sp["container_id"].(string)

	// goTest runs the probe's tests matching run and returns go test's
	// output, logging the evidence lines.
	goTest := func(t *testing.T, run string) (map[string]any, string) {
		t.Helper()
		var out map[string]any
		var stdout string
		for attempt := 1; ; attempt++ {
			res := call(t, cs, "execute_in_worker", execArgs("probe", map[string]any{
				"type": "exec", "command": []string{"go", "test", "-count=1", "-v", "-run", run, "./probe"},
			}))
			if res.isError {
				t.Fatalf("go test -run %s: %s", run, res.text)
			}
			out = res.out["output"].(map[string]any)
			stdout = out["stdout"].(string)
			// The first build of the probe under gVisor, on a loaded
			// machine, can pass the worker's action_timeout before any test
			// ran; the build cache keeps what it compiled, so once more
			// finishes it. A timeout once tests ran is the probe's result.
			if attempt < 3 && out["timed_out"] == true && !strings.Contains(stdout, "=== RUN") {
				t.Logf("go test -run %s timed out while building (attempt %d); again", run, attempt)
				continue
			}
			break
		}
		for _, line := range strings.Split(stdout, "\n") {
			if strings.Contains(line, "PROBE ") {
				t.Log(strings.TrimSpace(line))
			}
		}
		return out, stdout
	}
	// passed checks that go test ran every probe named and none failed.
	passed := func(t *testing.T, out map[string]any, stdout string, names ...string) {
		t.Helper()
		for _, n := range names {
			if !strings.Contains(stdout, "--- PASS: "+n+" ") {
				t.Errorf("probe %s did not pass", n)
			}
		}
		if out["exit_code"] != float64(0) {
			t.Errorf("go test exited %v (timed out: %v, quota: %v):\n%s\n%s", out["exit_code"], out["timed_out"], out["quota_exceeded"], stdout, out["stderr"])
		}
	}

	// The probe is built once before the subtests: its first build
	// compiles the standard library into the workspace's empty build cache,
	// which under gVisor on a loaded machine took more than a minute. Built
	// here, each subtest's go test only links and runs it, and a subtest's
	// time is its probe's.
	if out, stdout := goTest(t, "^$"); out["timed_out"] == true || out["exit_code"] != float64(0) {
		t.Fatalf("building the probe: exit %v, timed out %v:\n%s\n%s", out["exit_code"], out["timed_out"], stdout, out["stderr"])
	}

	t.Run("server cannot be traced, read or written to", func(t *testing.T) {
		if ociRuntime == "runsc" {
			// Measured: Debian's runsc (20221219) lets a process open
			// /proc/<pid>/fd/1 of a non-dumpable process of its uid, so a
			// command can write into the server's channel (it breaks; the
			// next action opens another). Left out here, and said in
			// docs/agents.md#gvisor, rather than asserted either way.
			t.Skip("gVisor does not honour PR_SET_DUMPABLE for /proc/<pid>/fd (docs/agents.md#gvisor)")
		}
		out, stdout := goTest(t, "^(TestPtrace|TestServerMemory|TestForgeLogs|TestIOURing)$")
		passed(t, out, stdout, "TestPtrace", "TestServerMemory", "TestForgeLogs", "TestIOURing")
		if logs := call(t, cs, "worker_logs", map[string]any{"journey_id": "probe"}); strings.Contains(logs.text, "forged") {
			t.Errorf("the worker's log holds a forged line: %s", logs.text)
		}
	})

	t.Run("nothing outlives the action", func(t *testing.T) {
		out, stdout := goTest(t, "^TestDaemon$")
		passed(t, out, stdout, "TestDaemon")
		top, err := exec.Command("docker", "top", container, "-eo", "pid,args").CombinedOutput()
		if err != nil {
			t.Fatalf("docker top: %v: %s", err, top)
		}
		if strings.Contains(string(top), "sleep 600") {
			t.Errorf("the daemon survived the action:\n%s", top)
		}
		t.Logf("processes in the worker after the action:\n%s", top)
		out, stdout = goTest(t, "^TestDaemonGone$")
		passed(t, out, stdout, "TestDaemonGone")
	})

	t.Run("a hard link does not pass the denied paths", func(t *testing.T) {
		out, stdout := goTest(t, "^TestHardLink$")
		passed(t, out, stdout, "TestHardLink")
		r := call(t, cs, "execute_in_worker", execArgs("probe", map[string]any{"type": "read", "target": "hard_env"}))
		if !r.isError || strings.Contains(r.text, "hunter2") {
			t.Errorf("read hard_env: %+v", r)
		}
		t.Logf("read hard_env: %s", r.text)
		s := must(t, cs, "execute_in_worker", execArgs("probe", map[string]any{"type": "search", "pattern": "hunter2"}))
		if strings.Contains(mustJSON(t, s["output"]), "hunter2") {
			t.Errorf("search found .env's content: %v", s["output"])
		}
	})

	t.Run("a search is bounded", func(t *testing.T) {
		alternation := strings.Repeat("(a|b|c)", 572) // 4,004 bytes
		r := call(t, cs, "execute_in_worker", execArgs("probe", map[string]any{"type": "search", "pattern": alternation}))
		if !r.isError || !strings.Contains(r.text, "1024") {
			t.Errorf("a 4 KB pattern: %+v", r)
		}
		t.Logf("4 KB pattern: %s", r.text)
		costly := strings.Repeat("(a|b|c)", 140) // under the size limit
		s := must(t, cs, "execute_in_worker", execArgs("probe", map[string]any{"type": "search", "pattern": costly}))
		out := s["output"].(map[string]any)
		if out["timed_out"] != true && out["lines_skipped"] == nil {
			t.Errorf("a costly pattern over a 3 MiB line was neither cut short nor skipped: %v", out)
		}
		t.Logf("costly pattern over a 3 MiB line: timed_out %v, lines_skipped %v", out["timed_out"], out["lines_skipped"])
	})

	t.Run("commands are checked flag by flag", func(t *testing.T) {
		for _, argv := range [][]string{
			{"go", "vet", "-vettool=/bin/sh", "./probe"},
			{"go", "test", "-exec", "/bin/sh", "./probe"},
			{"git", "diff", "--no-index", "/etc/passwd", "x"},
		} {
			r := call(t, cs, "execute_in_worker", execArgs("probe", map[string]any{"type": "exec", "command": argv}))
			if !r.isError || r.out["executed"] != false {
				t.Errorf("%q ran: %+v", argv, r)
			}
			t.Logf("%q: %s", argv, r.text)
		}
	})

	t.Run("a caller's live journeys are bounded", func(t *testing.T) {
		// The probe journey is one of ten.
		for i := range 9 {
			must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_research_v1", "journey_id": fmt.Sprintf("many-%d", i)})
		}
		r := call(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_research_v1", "journey_id": "eleventh"})
		if !r.isError || !strings.Contains(r.text, "the limit (--max-journeys-per-caller) is 10") {
			t.Fatalf("the 11th journey: %+v", r)
		}
		t.Logf("the 11th journey: %s", r.text)
		for i := range 9 {
			must(t, cs, "stop_worker", map[string]any{"journey_id": fmt.Sprintf("many-%d", i), "workspace": "delete"})
		}
	})

	t.Run("the workspace quota stops a command that fills it", func(t *testing.T) {
		out, stdout := goTest(t, "^TestFill$")
		reason, _ := out["quota_exceeded"].(string)
		if !strings.Contains(reason, "over its quota") || out["exit_code"] != float64(137) {
			t.Fatalf("quota_exceeded %q, exit %v:\n%s", reason, out["exit_code"], stdout)
		}
		t.Logf("TestFill: exit %v, quota_exceeded %q", out["exit_code"], reason)
		w := call(t, cs, "execute_in_worker", execArgs("probe", map[string]any{"type": "write", "target": "more.txt", "content": "x"}))
		if !w.isError || !regexp.MustCompile(`over its quota`).MatchString(w.text) {
			t.Errorf("a write over the quota: %+v", w)
		}
		t.Logf("a write after it: %s", w.text)
	})
}
