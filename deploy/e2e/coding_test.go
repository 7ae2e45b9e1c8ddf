//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/gittest"
)

// codingPipeline is the loop users come for, through the README's commands:
// a local repository under MESHWORK_SOURCES_DIR, coding_pipeline started
// with meshctl (the implementer the fake claude, scripted by the
// repository; the tester shell_v1 running the real go test), the approval,
// `meshctl runs patch`, and the real git applying the patch in a fresh
// clone, where the tests pass; then `meshctl runs export`'s bundle, which
// git pulls in another clone.
func (s *stack) codingPipeline(ctx context.Context, t *testing.T) {
	t.Helper()
	repo := gittest.Repo(t, filepath.Join(s.sourcesDir, "calc"), gittest.BuggyModule(t))
	var run struct {
		ID string `json:"id"`
	}
	s.meshctlJSON(ctx, t, &run, "run", "coding_pipeline",
		"--input-json", `repository={"git": {"url": "/sources/calc"}}`,
		"--input", "task=Fix Add so that it adds.")
	v := s.waitRun(ctx, t, run.ID, 4*time.Minute, "waiting", func(v runView) bool { return v.Status == "waiting" })
	attempts := map[string]int{}
	for _, a := range v.Attempts {
		attempts[a.NodeID]++
	}
	// The first implementation fails go test in shell_v1: the run goes
	// back to implement once, and the second passes.
	if attempts["implement"] != 2 || attempts["test"] != 2 || attempts["fix"] != 1 || attempts["review"] != 1 {
		t.Errorf("attempts per node %v: want implement 2, test 2, fix 1, review 1", attempts)
	}
	if out := v.Outputs["test"]; !strings.HasPrefix(out, "exit_code: 0") || !strings.Contains(out, "ok") {
		t.Errorf("the last go test: %q", out)
	}
	if out, code := s.meshctlRun(ctx, t, "runs", "approve", run.ID, "--value", "approved"); code != 0 {
		t.Fatalf("meshctl runs approve: exit %d: %s", code, out)
	}
	s.waitRun(ctx, t, run.ID, time.Minute, "succeeded", func(v runView) bool { return v.Status == "succeeded" })

	patch, code := s.meshctlRun(ctx, t, "runs", "patch", run.ID)
	if code != 0 || !strings.Contains(patch, "+"+gittest.FixedAdd) {
		t.Fatalf("meshctl runs patch: exit %d:\n%s", code, patch)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	gittest.Run(t, filepath.Dir(clone), "clone", "-q", repo, clone)
	pf := filepath.Join(filepath.Dir(clone), "change.patch")
	if err := os.WriteFile(pf, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, clone, "apply", "--check", pf)
	gittest.Run(t, clone, "apply", pf)
	test := exec.CommandContext(ctx, "go", "test", "./...")
	test.Dir = clone
	test.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	if out, err := test.CombinedOutput(); err != nil {
		t.Errorf("go test in the patched clone: %v\n%s", err, out)
	}

	// The whole workspace, as a bundle that git pulls in another clone.
	bundle := filepath.Join(t.TempDir(), "change.bundle")
	if out, code := s.meshctlRun(ctx, t, "runs", "export", run.ID, "-o", bundle); code != 0 {
		t.Fatalf("meshctl runs export: exit %d: %s", code, out)
	}
	pulled := filepath.Join(t.TempDir(), "pulled")
	gittest.Run(t, filepath.Dir(pulled), "clone", "-q", repo, pulled)
	gittest.Run(t, pulled, "pull", "-q", "--ff-only", bundle, "meshwork")
	if calc, err := os.ReadFile(filepath.Join(pulled, "calc.go")); err != nil || !strings.Contains(string(calc), gittest.FixedAdd) {
		t.Errorf("calc.go after git pull of the exported bundle: %v\n%s", err, calc)
	}
}
