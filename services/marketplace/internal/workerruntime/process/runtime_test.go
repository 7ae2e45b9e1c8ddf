package process_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/process"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/runtimetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	appPath   = "/usr/local/bin/app"
	probePath = "/usr/local/bin/probe"
)

// meshworker finds the binary `make build` writes, or builds it.
func meshworker(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MESHWORKER_BIN"); p != "" {
		return p
	}
	// services/marketplace/internal/workerruntime/process -> repository root.
	p, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "..", "bin", "linux_"+goruntime.GOARCH, "meshworker"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("meshworker binary missing (%v): run `make build`, or set MESHWORKER_BIN", err)
	}
	return p
}

type bundle struct {
	cfg    process.Config
	logger *slog.Logger
	logs   *bytes.Buffer
}

// setup returns a runtime on a fresh state directory.
func setup(t *testing.T, probe string) (*process.Runtime, *bundle) {
	t.Helper()
	b := &bundle{
		cfg: process.Config{
			StateDir: t.TempDir(),
			Binaries: map[string]string{appPath: meshworker(t)},
		},
		logs: &bytes.Buffer{},
	}
	if probe != "" {
		b.cfg.Binaries[probePath] = probe
	}
	b.logger = slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), b.logs), &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt, err := process.New(b.cfg, b.logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return rt, b
}

func TestConformance(t *testing.T) {
	probe := runtimetest.BuildProbe(t)
	runtimetest.Exercise(t, func(t *testing.T) workerruntime.Runtime {
		t.Helper()
		rt, _ := setup(t, probe)
		return rt
	}, runtimetest.Options{
		Probe: func(*testing.T, workerruntime.Runtime, workerruntime.Handle) string { return probePath },
	})
}

func TestNewWarnsWorkersAreNotIsolated(t *testing.T) {
	t.Parallel()
	_, b := setup(t, "")
	if !strings.Contains(b.logs.String(), "level=WARN") || !strings.Contains(b.logs.String(), "NOT isolated") {
		t.Errorf("New did not warn that workers are not isolated; logs:\n%s", b.logs)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	bin := meshworker(t)
	for name, cfg := range map[string]process.Config{
		"no state dir":      {Binaries: map[string]string{appPath: bin}},
		"relative in path":  {StateDir: t.TempDir(), Binaries: map[string]string{"app": bin}},
		"missing binary":    {StateDir: t.TempDir(), Binaries: map[string]string{appPath: filepath.Join(t.TempDir(), "nope")}},
		"directory binary":  {StateDir: t.TempDir(), Binaries: map[string]string{appPath: t.TempDir()}},
		"non-executable":    {StateDir: t.TempDir(), Binaries: map[string]string{appPath: writeFile(t, "plain", 0o644)}},
		"state dir is file": {StateDir: writeFile(t, "file", 0o644)},
	} {
		if _, err := process.New(cfg, nil); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

func writeFile(t *testing.T, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func spec(journey string) workerruntime.Spec {
	return workerruntime.Spec{Journey: journey, Worker: "process_test_v1", Image: "ignored", User: "65532:65532", Network: "none", Labels: map[string]string{"meshwork.test": "process"}}
}

// createWorker creates a worker for a new journey, for the tests that need
// one to run commands in.
func createWorker(t *testing.T, rt *process.Runtime) workerruntime.Handle {
	t.Helper()
	h, err := rt.Create(t.Context(), spec(uuid.NewString()))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestListSurvivesARestart(t *testing.T) {
	t.Parallel()
	rt, b := setup(t, "")
	journey := uuid.NewString()
	h, err := rt.Create(t.Context(), spec(journey))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(t.Context(), h, time.Second); err != nil {
		t.Fatal(err)
	}
	again, err := process.New(b.cfg, nil)
	if err != nil {
		t.Fatalf("New on the same StateDir: %v", err)
	}
	l, err := again.List(t.Context(), map[string]string{"meshwork.test": "process"})
	if err != nil {
		t.Fatal(err)
	}
	want := workerruntime.Listed{Handle: h, Journey: journey, Worker: "process_test_v1", State: workerruntime.StateStopped}
	if len(l) != 1 || l[0] != want {
		t.Errorf("List after restart = %+v, want [%+v]", l, want)
	}
	if fi, err := os.Stat(h.Workspace); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("workspace %s: %v, mode %v, want a 0700 directory", h.Workspace, err, fi.Mode())
	}
}

func TestExecRewritesWorkspacePaths(t *testing.T) {
	t.Parallel()
	rt, _ := setup(t, runtimetest.BuildProbe(t))
	h := createWorker(t, rt)
	s, err := rt.Exec(t.Context(), h, []string{probePath, "write", "/workspace/sub/file.txt"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := io.WriteString(s, "rewritten"); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if code, err := s.Wait(); err != nil || code != 0 {
		t.Fatalf("probe write: code %d, %v", code, err)
	}
	got, err := os.ReadFile(filepath.Join(h.Workspace, "sub", "file.txt"))
	if err != nil || string(got) != "rewritten" {
		t.Errorf("workspace file: %q, %v", got, err)
	}
	if _, err := rt.Exec(t.Context(), h, []string{"/bin/sh", "-c", "true"}); err == nil {
		t.Error("Exec of a binary not in Config.Binaries succeeded")
	}
}

func TestLogsHoldExecStderr(t *testing.T) {
	t.Parallel()
	rt, _ := setup(t, runtimetest.BuildProbe(t))
	h := createWorker(t, rt)
	for _, line := range []string{"first", "second", "third"} {
		s, err := rt.Exec(t.Context(), h, []string{probePath, "stderr", line})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, s)
		if code, err := s.Wait(); err != nil || code != 0 {
			t.Fatalf("probe stderr: code %d, %v", code, err)
		}
		_ = s.Close()
	}
	// The stderr copy may trail the exit by a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs, err := rt.Logs(t.Context(), h, 2)
		if err != nil {
			t.Fatal(err)
		}
		if string(logs) == "second\nthird\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Logs(tail 2) = %q, want the last two stderr lines", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCloseKillsTheProcessGroup checks that closing a session kills a
// process that ignores end of input, and its children.
func TestCloseKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("needs sh")
	}
	_, b := setup(t, "")
	b.cfg.Binaries["/bin/sh"] = sh
	rt, err := process.New(b.cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := createWorker(t, rt)
	// The child sleeps in the background and reports its pid; the shell
	// ignores SIGTERM, so only the group SIGKILL ends it.
	s, err := rt.Exec(t.Context(), h, []string{"/bin/sh", "-c", `trap "" TERM; sleep 600 & echo $!; wait`})
	if err != nil {
		t.Fatal(err)
	}
	var line [32]byte
	n, err := s.Read(line[:])
	if err != nil {
		t.Fatal(err)
	}
	child := strings.TrimSpace(string(line[:n]))
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _ := s.Wait(); code == 0 {
		t.Errorf("a killed session exited 0")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %s", d)
	}
	// SIGKILL is delivered asynchronously; then the child is a zombie until
	// whoever inherits it reaps it. Either way it must stop running.
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + child + "/stat")
		if errors.Is(err, os.ErrNotExist) || strings.Contains(string(stat), ") Z") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session's child %s survived Close: %s", child, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRemoveRefusesForeignWorkspaces(t *testing.T) {
	t.Parallel()
	rt, _ := setup(t, "")
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep.txt")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, h := range []workerruntime.Handle{
		{Workspace: outside},
		{ID: "../..", Workspace: ""},
		{ID: "ok", Workspace: outside},
	} {
		if err := rt.Remove(t.Context(), h, workerruntime.RemoveOptions{Workspace: true}); err == nil {
			t.Errorf("Remove(%+v) succeeded", h)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a foreign directory was touched: %v", err)
	}
}

func TestExecContextKillsTheProcess(t *testing.T) {
	t.Parallel()
	rt, _ := setup(t, runtimetest.BuildProbe(t))
	h := createWorker(t, rt)
	ctx, cancel := context.WithCancel(t.Context())
	s, err := rt.Exec(ctx, h, []string{probePath, "sleep"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	line := make([]byte, len("sleeping\n"))
	if _, err := io.ReadFull(s, line); err != nil {
		t.Fatal(err)
	}
	cancel()
	code, err := s.Wait()
	if err != nil || code != 128+9 {
		t.Errorf("after ctx was done, Wait = %d, %v; want 137 (SIGKILL)", code, err)
	}
}
