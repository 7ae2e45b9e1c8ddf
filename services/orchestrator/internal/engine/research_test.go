package engine_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/marketplace"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/mesh"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor/meshexectest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/pipelines"
	"github.com/meshwork/meshwork/workers"
)

// fakeAgentImage is the test-only agent worker image whose claude is the
// fake (make test-images).
const fakeAgentImage = "meshwork/claude-worker-fake:test"

// The shipped research_pipeline end to end, on real parts: the researcher
// and the reviewer are agents behind a real mesh-exec (the fake claude), the
// writer is the marketplace's Claude Code worker in its own container. The
// reviewer's session asks for changes on its first turn and approves on its
// second, so the bounded revise loop runs once; then the run waits for a
// human, whose decision completes it.
func TestResearchPipeline(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker, Postgres and the test images")
	}
	t.Parallel()
	requireImage(t, fakeAgentImage)
	ctx := context.Background()
	pool, dsn := testDatabase(t)

	// Each fake session answers turn by turn: the reviewer's first review
	// asks for changes, its second approves.
	meshSrv := meshexectest.Start(t, meshexectest.Options{Script: map[string]any{
		"turns": []any{map[string]any{"reply": "CHANGES: add figures"}, map[string]any{"reply": "APPROVED"}},
	}})
	mp := startMarketplace(t, dsn)

	meshEx, err := mesh.New(mesh.Config{Endpoint: meshSrv.Endpoint, Token: meshSrv.Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = meshEx.Close() })
	mpEx, err := marketplace.New(marketplace.Config{Endpoint: mp.endpoint, Token: mp.token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mpEx.Close() })
	cat, err := pipelines.Load()
	if err != nil {
		t.Fatal(err)
	}
	eng := startEngine(t, pool, cat, map[pipeline.Via]executor.Executor{pipeline.ViaMesh: meshEx, pipeline.ViaMarketplace: mpEx}, "")

	run := start(t, eng, "research_pipeline", map[string]any{"task": "the history of Go's scheduler"})
	v := waitStatus(t, eng, run.ID, runstate.RunWaiting)

	// Every role's session is in Postgres, and each role kept one session.
	for _, role := range []string{"researcher", "writer", "reviewer"} {
		if len(v.Sessions[role]) != 36 {
			t.Errorf("role %s has session %q, want a session id", role, v.Sessions[role])
		}
	}
	counts := map[string]int{}
	for _, a := range v.Attempts {
		counts[a.NodeID]++
		role := map[string]string{"research": "researcher", "write": "writer", "revise": "writer", "review": "reviewer"}[a.NodeID]
		if a.SessionID != v.Sessions[role] {
			t.Errorf("node %s ran in session %s, not its role's %s", a.NodeID, a.SessionID, v.Sessions[role])
		}
	}
	if counts["research"] != 1 || counts["write"] != 2 || counts["review"] != 2 || counts["revise"] != 1 {
		t.Errorf("attempts per node %v: want research 1, write 2, review 2, revise 1", counts)
	}
	// Outputs flow through the templates: the researcher's first turn went
	// into the writer's task, which the fake echoes ("ok: <task>").
	if !strings.Contains(v.Outputs["write"], "CHANGES: add figures") || !strings.Contains(v.Outputs["write"], "Write a report for software engineers") {
		t.Errorf("write's output %q does not carry the research and the inputs", v.Outputs["write"])
	}
	if v.Outputs["review"] != "APPROVED" {
		t.Errorf("the second review %q, want APPROVED", v.Outputs["review"])
	}
	// The reviewer's second review resumed its session (the fake's second turn).
	var resumed int
	for _, inv := range meshSrv.Invocations(t) {
		if argv, _ := inv["argv"].([]any); strings.Contains(fmt.Sprint(argv), "--resume") {
			resumed++
		}
	}
	if resumed != 1 {
		t.Errorf("%d mesh-exec runs resumed a session, want 1 (the second review)", resumed)
	}

	if len(v.Interrupts) != 1 {
		t.Fatalf("interrupts %+v", v.Interrupts)
	}
	if _, err := eng.Resume(ctx, engine.ResumeRequest{InterruptID: v.Interrupts[0].ID, Value: json.RawMessage(`"ship it"`), DecidedBy: "editor"}); err != nil {
		t.Fatal(err)
	}
	v = waitStatus(t, eng, run.ID, runstate.RunSucceeded)
	if v.Outputs["approve"] != "ship it" || v.Interrupts[0].DecidedBy != "editor" {
		t.Errorf("approval output %q by %q", v.Outputs["approve"], v.Interrupts[0].DecidedBy)
	}

	// A second run on the same thread resumes every role's own session.
	second, err := eng.StartRun(ctx, engine.StartRequest{Pipeline: "research_pipeline", Inputs: map[string]any{"task": "again"}, Thread: run.Thread})
	if err != nil {
		t.Fatal(err)
	}
	v2 := waitStatus(t, eng, second.ID, runstate.RunWaiting, runstate.RunSucceeded)
	for _, a := range v2.Attempts {
		if a.NodeID == "research" && a.SessionID != v.Sessions["researcher"] {
			t.Errorf("the second run's researcher used session %s, want %s", a.SessionID, v.Sessions["researcher"])
		}
		if a.NodeID == "write" && a.SessionID != v.Sessions["writer"] {
			t.Errorf("the second run's writer used session %s, want %s", a.SessionID, v.Sessions["writer"])
		}
	}
}

func requireImage(t *testing.T, image string) {
	t.Helper()
	if err := exec.Command("docker", "image", "inspect", image).Run(); err != nil {
		t.Fatalf("image %s is missing: run `make test-images` (or `make offline-images`)", image)
	}
}

type marketplaceProcess struct {
	endpoint, token string
}

var buildMarketplace = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "meshwork-marketplace-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "marketplace")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/meshwork/meshwork/services/marketplace/cmd/marketplace").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the marketplace: %w\n%s", err, out)
	}
	return bin, nil
})

// startMarketplace runs `marketplace serve --transport http` on dsn's
// database with the built-in catalog, but the Claude Code worker on the
// fake agent image. Its containers carry a label of this test's, and are
// removed with it.
func startMarketplace(t *testing.T, dsn string, extraArgs ...string) *marketplaceProcess {
	t.Helper()
	bin, err := buildMarketplace()
	if err != nil {
		t.Fatal(err)
	}
	catalog := t.TempDir()
	if err := os.CopyFS(catalog, workers.FS()); err != nil {
		t.Fatal(err)
	}
	claude := filepath.Join(catalog, "claude_code_assistant_v1.yaml")
	b, err := os.ReadFile(claude)
	if err != nil {
		t.Fatal(err)
	}
	b = []byte(strings.Replace(string(b), "image: meshwork/claude-worker:latest", "image: "+fakeAgentImage, 1))
	if err := os.WriteFile(claude, b, 0o600); err != nil {
		t.Fatal(err)
	}
	label := fmt.Sprintf("orchestrator-%d-%d", os.Getpid(), time.Now().UnixNano())
	token := "orchestrator-test-token-0123456789"
	args := []string{
		"serve", "--transport", "http", "--addr", "127.0.0.1:0", "--catalog", catalog, "--labels", "meshwork.test=" + label, "--base-dir", t.TempDir(),
		"--egress-network", "meshwork-test-" + label, // the Claude Code worker is an egress worker
	}
	cmd := exec.Command(bin, append(args, extraArgs...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "MESHWORK_TOKENS=orchestrator="+token, "ANTHROPIC_API_KEY=test-key-not-real")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		removeLabelled(t, "meshwork.test="+label)
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Addr != "" && !sent {
				addr <- line.Addr
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case a := <-addr:
		return &marketplaceProcess{endpoint: "http://" + a + "/mcp", token: token}
	case <-time.After(60 * time.Second):
		t.Fatal("the marketplace did not start serving")
		return nil
	}
}

// removeLabelled removes the containers and volumes carrying label.
func removeLabelled(t *testing.T, label string) {
	t.Helper()
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+label).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-fv"}, ids...)...).Run()
	}
	out, _ = exec.Command("docker", "volume", "ls", "-q", "--filter", "label="+label).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"volume", "rm", "-f"}, ids...)...).Run()
	}
	out, _ = exec.Command("docker", "network", "ls", "-q", "--filter", "label="+label).Output()
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"network", "rm"}, ids...)...).Run()
	}
}
