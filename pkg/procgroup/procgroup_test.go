package procgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// alive reports whether pid is a process (not yet reaped or a zombie of
// init) by signal 0.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// startShell starts sh with a background child and returns the child's pid,
// which the shell writes to a file before it waits.
func startShell(t *testing.T, cmd *exec.Cmd, pidFile string) int {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, err := os.ReadFile(pidFile)
		if err == nil && strings.HasSuffix(string(data), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
	}
	t.Fatal("the shell did not start its child")
	return 0
}

func gone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !alive(pid) {
			return
		}
	}
	t.Errorf("process %d outlived its group's stop", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// A cancelled command takes its background child with it, and Kill ends
// what is left of a group; without the group the child would live on.
func TestCancelAndKillReachTheGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, "sh", "-c", `sleep 300 & echo $! > "$1"; wait`, "sh", pidFile)
	Lead(cmd)
	CancelWith(cmd, syscall.SIGTERM)
	child := startShell(t, cmd, pidFile)
	cancel()
	_ = cmd.Wait()
	gone(t, child)
	Kill(cmd) // the group is gone: no error, no signal elsewhere
}

// Stop sends SIGTERM and, to a group that ignores it, SIGKILL after the
// grace; Lead keeps the attributes already set.
func TestStopEscalates(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command("sh", "-c", `trap "" TERM; sleep 300 & echo $! > "$1"; wait`, "sh", pidFile)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	Lead(cmd)
	if !cmd.SysProcAttr.Setpgid || cmd.SysProcAttr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("SysProcAttr = %+v", cmd.SysProcAttr)
	}
	child := startShell(t, cmd, pidFile)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	start := time.Now()
	Stop(cmd.Process.Pid, 200*time.Millisecond, exited)
	<-exited
	if time.Since(start) < 200*time.Millisecond {
		t.Errorf("the group ignoring SIGTERM ended before the grace: %s", time.Since(start))
	}
	gone(t, child)
	if err := Signal(0, syscall.SIGKILL); err == nil {
		t.Error("Signal(0) would signal the caller's own group")
	}
}
