// Package probe is adversarial code run inside a shell_v1 worker through
// `go test`, as a repository's tests would run. Each test tries one attack
// on the worker's own server or container and fails if it succeeds; what
// it saw is logged as "PROBE name: evidence" for the marketplace's test to
// check and print. It builds with the worker image's Go (1.19): standard
// library only.
package probe

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// server is the nearest ancestor serving the workspace: meshworker serve.
func server(t *testing.T) int {
	for pid := os.Getppid(); pid > 1; pid = parentOf(pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "serve") {
			return pid
		}
	}
	t.Fatal("no ancestor serving the workspace")
	return 0
}

func TestPtrace(t *testing.T) {
	pid := server(t)
	err := syscall.PtraceAttach(pid)
	if err == nil {
		_ = syscall.PtraceDetach(pid)
		t.Errorf("ptrace attached to the server (pid %d)", pid)
	}
	t.Logf("PROBE ptrace: attach to the server (pid %d): %v", pid, err)
}

func TestServerMemory(t *testing.T) {
	pid := server(t)
	for _, name := range []string{"mem", "environ", "fd/1"} {
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/%s", pid, name), os.O_RDONLY, 0)
		if err == nil {
			f.Close()
			t.Errorf("opened the server's /proc/%d/%s", pid, name)
		}
		t.Logf("PROBE server-proc: open /proc/<server>/%s: %v", name, err)
	}
}

func TestForgeLogs(t *testing.T) {
	pid := server(t)
	for _, p := range []string{"/proc/1/fd/1", "/proc/1/fd/2", fmt.Sprintf("/proc/%d/fd/1", pid)} {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			fmt.Fprintln(f, `{"level":"INFO","msg":"forged"}`)
			f.Close()
			t.Errorf("wrote into %s", p)
		}
		t.Logf("PROBE forge-output: open %s for writing: %v", p, err)
	}
}

func TestIOURing(t *testing.T) {
	var params [120]byte // struct io_uring_params
	fd, _, errno := syscall.Syscall(425 /* io_uring_setup, amd64 */, 8, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno == 0 {
		syscall.Close(int(fd))
		t.Error("io_uring_setup succeeded")
	}
	t.Logf("PROBE io_uring: io_uring_setup: %v", errno)
}

// TestDaemon leaves a setsid'd process behind and records its pid; the
// next action checks it is gone.
func TestDaemon(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("../daemon.pid", []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("PROBE daemon: started a setsid'd sleep, pid %d", cmd.Process.Pid)
}

func TestDaemonGone(t *testing.T) {
	b, err := os.ReadFile("../daemon.pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(b))
	err = syscall.Kill(pid, 0)
	if err == nil {
		t.Errorf("the daemon (pid %d) is still running", pid)
	}
	t.Logf("PROBE daemon-gone: signal 0 to pid %d: %v", pid, err)
}

func TestHardLink(t *testing.T) {
	err := os.Link("../.env", "../hard_env")
	if err != nil {
		t.Fatal(err)
	}
	t.Log("PROBE hard-link: hard_env links to .env")
}

// TestFill writes a MiB at a time until something stops it.
func TestFill(t *testing.T) {
	buf := make([]byte, 1<<20)
	for i := 0; i < 4096; i++ {
		if err := os.WriteFile(fmt.Sprintf("../fill-%d", i), buf, 0o644); err != nil {
			t.Logf("PROBE fill: write %d: %v", i, err)
			return
		}
	}
}
