package proctree_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/meshwork/meshwork/pkg/proctree"
)

// TestMain doubles as the helper process of TestProtect.
func TestMain(m *testing.M) {
	if os.Getenv("PROCTREE_PROTECT_CHILD") == "1" {
		before, _ := proctree.Dumpable()
		err := proctree.Protect()
		after, _ := proctree.Dumpable()
		fmt.Printf("%t %t %v\n", before, after, err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestProtect(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PROCTREE_PROTECT_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "true false <nil>" {
		t.Fatalf("dumpable before, after, error = %q; want \"true false <nil>\"", got)
	}
}

// alive reports whether pid exists, zombies included: a sweep must reap
// what it kills, or the process table fills with them.
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// daemon starts a shell that leaves a setsid'd sleep behind and exits, and
// returns the sleep's pid.
func daemon(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("the daemon %d is not running", pid)
	}
	return pid
}

func TestSweeperEndsWhatLeftTheGroup(t *testing.T) {
	s, err := proctree.NewSweeper(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cmd := s.Begin()
	cmd.Started(os.Getpid()) // the shell is waited for by daemon; any pid will do
	pid := daemon(t)
	cmd.End()
	if alive(pid) {
		t.Fatalf("the setsid daemon %d outlived the sweep (or was not reaped)", pid)
	}
	cmd.End() // a second call is a no-op
}

// A server without a sweeper registers its commands all the same: a nil
// Sweeper's commands are nil and do nothing.
func TestNilSweeperDoesNothing(t *testing.T) {
	var s *proctree.Sweeper
	cmd := s.Begin()
	if cmd != nil {
		t.Fatalf("a nil Sweeper's Begin returned %+v", cmd)
	}
	cmd.Started(os.Getpid())
	cmd.End()
}

func TestSweeperWaitsForTheLastCommand(t *testing.T) {
	s, err := proctree.NewSweeper(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	longCmd := s.Begin()
	long := exec.Command("sleep", "300")
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	longCmd.Started(long.Process.Pid)
	t.Cleanup(func() { _ = long.Process.Kill(); _ = long.Wait() })

	short := s.Begin()
	short.End() // never started
	short = s.Begin()
	pid := daemon(t)
	short.End()
	if !alive(pid) || !alive(long.Process.Pid) {
		t.Fatal("a sweep ran while another command was still running")
	}
	// The long command ends; its Wait comes first, as the servers do.
	_ = long.Process.Kill()
	if err := long.Wait(); err == nil || strings.Contains(err.Error(), "no child") {
		t.Errorf("the long command's exit status was taken from its caller: %v", err)
	}
	longCmd.End()
	if alive(pid) {
		t.Fatalf("the daemon %d outlived the last command", pid)
	}
}

// A lineage that forks without end is still ended: each round stops what
// it finds before killing it.
func TestSweeperEndsAForkingLineage(t *testing.T) {
	s, err := proctree.NewSweeper(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	cmd := s.Begin()
	cmd.Started(os.Getpid())
	// Each process starts its successor and exits at once.
	out, err := exec.Command("sh", "-c", `(setsid sh -c 'g() { g & exit 0; }; g' </dev/null >/dev/null 2>&1 &); echo ok`).Output()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%q: %v", out, err)
	}
	cmd.End()
	if n := countDescendants(os.Getpid()); n != 0 {
		t.Fatalf("%d processes of the lineage survived the sweep", n)
	}
}

// countDescendants counts the processes below pid, zombies included.
func countDescendants(pid int) int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		parent[p], _ = strconv.Atoi(f[1])
	}
	n := 0
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				n++
				break
			}
		}
	}
	return n
}
