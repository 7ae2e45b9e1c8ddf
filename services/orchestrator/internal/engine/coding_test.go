package engine_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/tartest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// shellWorkerImage is the catalog's shell_v1 image: Go and git (make
// offline-images).
const shellWorkerImage = "meshwork/shell-worker:latest"

// The shipped coding_pipeline end to end, on real parts: the real
// marketplace seeds the implementer (the Claude Code worker, the fake
// claude) from a local repository; shell_v1 runs the real `go test` on the
// implementer's patch in a fresh workspace, fails, and the run goes back to
// implement; the second patch passes; the reviewer reads it; after the
// approval the run's patch applies with the real git and its tests pass.
func TestCodingPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker, Postgres and the worker images")
	}
	t.Parallel()
	requireImage(t, fakeAgentImage)
	requireImage(t, shellWorkerImage)
	ctx := context.Background()
	pool, dsn := pgtest.PoolAndDSN(t)
	root := t.TempDir()
	repo := gittest.Repo(t, filepath.Join(root, "calc"), gittest.BuggyModule(t))
	mpEx := startMarketplace(t, dsn, "--source-roots", root)
	eng := startEngine(t, pool, shippedCatalog(t), map[pipeline.Via]executor.Executor{pipeline.ViaMarketplace: mpEx}, "")

	run := start(t, eng, "coding_pipeline", map[string]any{
		"repository": map[string]any{"git": map[string]any{"url": repo}},
		"task":       "Fix Add so that it adds.",
	})
	v := waitStatus(t, eng, run.ID, runstate.RunWaiting, runstate.RunFailed)
	if v.Status != runstate.RunWaiting {
		t.Fatalf("run %s: %s (%s); attempts %+v", v.ID, v.Status, v.Error, v.Attempts)
	}
	counts := map[string]int{}
	for _, a := range v.Attempts {
		counts[a.NodeID]++
	}
	if counts["implement"] != 2 || counts["test"] != 2 || counts["fix"] != 1 || counts["review"] != 1 {
		t.Errorf("attempts per node %v: want implement 2, test 2, fix 1, review 1", counts)
	}
	// The first test failed for real (go test in shell_v1), so fix ran and
	// the run went back to implement; the last test passed.
	for _, n := range v.Nodes {
		if n.ID == "test" && !strings.HasPrefix(n.Output, "exit_code: 0") {
			t.Errorf("the last test run: %q", n.Output)
		}
	}
	patch, _, _ := v.NodePatch(v.PatchNode)
	if v.PatchNode != "implement" || !strings.Contains(patch, "+"+gittest.FixedAdd) || !strings.Contains(patch, "-"+gittest.BuggyAdd) {
		t.Fatalf("the run's patch (node %q):\n%s", v.PatchNode, patch)
	}
	if strings.Contains(patch, ".meshwork") || strings.Contains(patch, ".fake-claude.json") {
		t.Errorf("the patch carries more than the change:\n%s", patch)
	}

	// What the implementer's agent did is in the run's events: each Edit,
	// checked by the gate in its worker before it ran.
	var edits []string
	err := eng.Watch(ctx, run.ID, -1, func(ev engine.Event) error {
		if ev.Type == "agent" && ev.Agent.Kind == "pre_tool" && ev.Agent.Decision != nil && ev.Agent.Decision.Allowed {
			edits = append(edits, ev.NodeID+": "+ev.Agent.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"implement: Editing calc.go", "implement: Editing calc.go"}; strings.Join(edits, "\n") != strings.Join(want, "\n") {
		t.Errorf("the run's agent events: %q, want %q", edits, want)
	}

	if _, err := eng.Resume(ctx, engine.ResumeRequest{InterruptID: v.Interrupts[0].ID, Value: json.RawMessage(`"approved"`), DecidedBy: "lead"}); err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, eng, run.ID, runstate.RunSucceeded)

	// The patch applies with the real git in a fresh clone, and the tests
	// pass there.
	clone := filepath.Join(root, "clone")
	gittest.Run(t, root, "clone", "-q", repo, clone)
	pf := filepath.Join(root, "change.patch")
	if err := os.WriteFile(pf, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, clone, "apply", "--check", pf)
	gittest.Run(t, clone, "apply", pf)
	test := exec.Command("go", "test", "./...")
	test.Dir = clone
	test.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := test.CombinedOutput(); err != nil {
		t.Errorf("go test in the patched clone: %v\n%s", err, out)
	}

	// The workspace that holds the patch node's change, whole: git pulls
	// the bundle in a fresh clone, and the tar holds the fixed file.
	ws, err := export(ctx, eng, run.ID, "implement", "bundle")
	if err != nil {
		t.Fatal(err)
	}
	implementer := ""
	for _, a := range v.Attempts {
		if a.NodeID == "implement" {
			implementer = a.Journey
		}
	}
	if ws.Journey == "" || ws.Journey != implementer || ws.Commit == "" {
		t.Errorf("export: journey %q (implement's attempts name %q), commit %q", ws.Journey, implementer, ws.Commit)
	}
	bundle := filepath.Join(root, "change.bundle")
	if err := os.WriteFile(bundle, ws.Content, 0o644); err != nil {
		t.Fatal(err)
	}
	pulled := filepath.Join(root, "pulled")
	gittest.Run(t, root, "clone", "-q", repo, pulled)
	gittest.Run(t, pulled, "pull", "-q", "--ff-only", bundle, "meshwork")
	if head := strings.TrimSpace(gittest.Run(t, pulled, "rev-parse", "HEAD")); head != ws.Commit {
		t.Errorf("after git pull of the bundle HEAD is %s, want its commit %s", head, ws.Commit)
	}
	if diff := gittest.Run(t, pulled, "diff", "HEAD~1", "HEAD"); !strings.Contains(diff, "+"+gittest.FixedAdd) {
		t.Errorf("the bundle's commit:\n%s", diff)
	}
	tarred, err := export(ctx, eng, run.ID, "implement", "tar")
	if err != nil {
		t.Fatal(err)
	}
	if calc := tartest.Files(t, tarred.Content)["calc.go"]; !strings.Contains(calc, gittest.FixedAdd) {
		t.Errorf("calc.go in the tar:\n%s", calc)
	}
	// fix was skipped by the last pass of the loop: it has no change to
	// take (a node whose journey moved on is TestExportWorkspace's).
	for _, bad := range []struct{ node, format string }{{"fix", "bundle"}, {"approve", "bundle"}, {"nope", "tar"}, {"implement", "zip"}} {
		_, err := export(ctx, eng, run.ID, bad.node, bad.format)
		want := map[string]string{"fix": "conflict", "approve": "invalid_argument", "nope": "invalid_argument", "implement": "invalid_argument"}[bad.node]
		if code := engine.ErrorCode(err); string(code) != want {
			t.Errorf("export of %s as %s: %v (%s), want %s", bad.node, bad.format, err, code, want)
		}
	}

	// A fork from the checkpoint of the second implement, on a thread of
	// its own: its test and review are seeded from the implementer's
	// journey on the first run's thread, where that patch was made.
	cps, err := eng.RecentCheckpoints(ctx, run.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	seq := -1
	for _, cp := range cps {
		if cp.NodeID == "implement" && cp.Iteration == 2 {
			seq = cp.Seq
		}
	}
	if seq < 0 {
		t.Fatalf("no checkpoint of the second implement among %+v", cps)
	}
	fork, err := eng.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	fv := waitStatus(t, eng, fork.ID, runstate.RunWaiting, runstate.RunFailed)
	if fpatch, _, _ := fv.NodePatch(fv.PatchNode); fv.Status != runstate.RunWaiting || fpatch != patch || fv.Thread == v.Thread {
		t.Fatalf("the fork %s on thread %s: %s (%s), patch %q; want it waiting with the run's patch; attempts %+v", fv.ID, fv.Thread, fv.Status, fv.Error, fpatch, fv.Attempts)
	}
	for _, n := range fv.Nodes {
		if n.ID == "test" && !strings.HasPrefix(n.Output, "exit_code: 0") {
			t.Errorf("the fork's test: %q", n.Output)
		}
	}
	// The fork's implement is the run's: its workspace is the run's
	// journey's.
	fws, err := export(ctx, eng, fork.ID, "implement", "tar")
	if err != nil || fws.Journey != ws.Journey {
		t.Fatalf("the fork's export: %v, journey %q, want the run's %s", err, fws.Journey, ws.Journey)
	}
	if calc := tartest.Files(t, fws.Content)["calc.go"]; !strings.Contains(calc, gittest.FixedAdd) {
		t.Errorf("calc.go in the fork's tar:\n%s", calc)
	}
}
