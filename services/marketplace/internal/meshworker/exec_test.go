package meshworker_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
)

func TestExec(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{AllowExec: true, MaxOutput: 100})
	writeFiles(t, b.root, map[string]string{"script.sh": "#!/bin/sh\necho from script \"$1\"\n"})
	if err := os.Chmod(filepath.Join(b.root, "script.sh"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		cmd  []string
		want execResult
	}{
		{
			name: "output on both streams",
			cmd:  []string{"sh", "-c", "echo out; echo err >&2"},
			want: execResult{Stdout: "out\n", Stderr: "err\n"},
		},
		{
			name: "non-zero exit is a result, not an error",
			cmd:  []string{"sh", "-c", "echo failing >&2; exit 3"},
			want: execResult{ExitCode: 3, Stderr: "failing\n"},
		},
		{
			name: "argv, never a shell",
			cmd:  []string{"echo", "$HOME", "; rm -rf /", "`id`"},
			want: execResult{Stdout: "$HOME ; rm -rf / `id`\n"},
		},
		{
			name: "minimal environment",
			cmd:  []string{"env"},
			want: execResult{Stdout: "PATH=/usr/local/bin:/usr/bin:/bin\nHOME=/tmp\n"},
		},
		{
			name: "a program in the workspace, relative to the root",
			cmd:  []string{"./script.sh", "arg"},
			want: execResult{Stdout: "from script arg\n"},
		},
		{
			name: "killed by a signal: 128+N",
			cmd:  []string{"sh", "-c", "kill -9 $$"},
			want: execResult{ExitCode: 137},
		},
		{
			name: "stdout capped at max-output",
			cmd:  []string{"seq", "1", "100000"},
			want: execResult{Stdout: seq(100), Truncated: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var r execResult
			b.ok(t, "exec", map[string]any{"command": tt.cmd}, &r)
			if r != tt.want {
				t.Errorf("got  %+v\nwant %+v", r, tt.want)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		b.fails(t, "exec", map[string]any{"command": []string{}}, "command is required")
		b.fails(t, "exec", map[string]any{"command": []string{"no-such-program-xyz"}}, "not found")
		b.fails(t, "exec", map[string]any{"command": []string{"./missing.sh"}}, "no such file")
		b.fails(t, "exec", map[string]any{"command": []string{"true"}, "timeout_ms": -1}, "negative")
	})
}

// seq is the first n bytes of the output of "seq 1 100000".
func seq(n int) string {
	var b strings.Builder
	for i := 1; b.Len() < n; i++ {
		b.WriteString(strconv.Itoa(i) + "\n")
	}
	return b.String()[:n]
}

// A worker image's Go settings reach commands, and the GOTMPDIR they name
// is made for them.
func TestExecEnv(t *testing.T) {
	t.Parallel()
	tmp := filepath.Join(t.TempDir(), "go", "tmp")
	b := setup(t, meshworker.Config{AllowExec: true, ExecEnv: []string{"GOTMPDIR=" + tmp, "GOPROXY=off"}})
	var r execResult
	b.ok(t, "exec", map[string]any{"command": []string{"env"}}, &r)
	if want := "PATH=/usr/local/bin:/usr/bin:/bin\nHOME=/tmp\nGOTMPDIR=" + tmp + "\nGOPROXY=off\n"; r.Stdout != want {
		t.Errorf("environment:\n%s\nwant\n%s", r.Stdout, want)
	}
	if fi, err := os.Stat(tmp); err != nil || !fi.IsDir() {
		t.Errorf("GOTMPDIR was not created: %v", err)
	}
}

func TestToolchainEnv(t *testing.T) {
	t.Parallel()
	environ := []string{
		"PATH=/opt/bin", "HOME=/root", "GOCACHE=/ws/.meshwork/go/cache", "DATABASE_URL=postgres://secret",
		"GOTMPDIR=/ws/.meshwork/go/tmp", "GOPROXY=off", "GOTOOLCHAIN=local", "GOCACHEPROG=x", "XGOPATH=y",
	}
	want := []string{"GOCACHE=/ws/.meshwork/go/cache", "GOTMPDIR=/ws/.meshwork/go/tmp", "GOPROXY=off", "GOTOOLCHAIN=local"}
	if got := meshworker.ToolchainEnv(environ); !slices.Equal(got, want) {
		t.Errorf("ToolchainEnv = %q, want %q", got, want)
	}
}

func TestExecRefusedWithoutAllowExec(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{})
	b.fails(t, "exec", map[string]any{"command": []string{"touch", "made.txt"}}, "exec is not allowed")
	if _, err := os.Stat(filepath.Join(b.root, "made.txt")); err == nil {
		t.Error("the command ran")
	}
}

func TestExecTimeoutKillsTheProcessGroup(t *testing.T) {
	t.Parallel()
	// Long enough for the shell to start, set its trap and print its pid
	// on a loaded machine (at 300 ms it was sometimes killed before).
	b := setup(t, meshworker.Config{AllowExec: true, ExecTimeout: 1500 * time.Millisecond})

	tests := []struct {
		name string
		cmd  []string
		// atLeast is how long the kill must take: SIGTERM ignored means
		// the 2 s grace before SIGKILL.
		atLeast time.Duration
	}{
		{"children in the background and the foreground", []string{"sh", "-c", "echo $$; sleep 30 & sleep 30"}, 0},
		{"a group that ignores SIGTERM", []string{"sh", "-c", "trap '' TERM; echo $$; sleep 30 & sleep 30; sleep 30"}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			var r execResult
			// The caller asks for a minute; the server's cap wins.
			b.ok(t, "exec", map[string]any{"command": tt.cmd, "timeout_ms": 60_000}, &r)
			took := time.Since(start)
			if !r.TimedOut {
				t.Errorf("timed_out = false: %+v", r)
			}
			if took < tt.atLeast || took > 20*time.Second {
				t.Errorf("took %v", took)
			}
			pgid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
			if err != nil {
				t.Fatalf("stdout %q: %v", r.Stdout, err)
			}
			waitGroupGone(t, pgid)
		})
	}
}

func TestExecLeavesNoBackgroundProcess(t *testing.T) {
	t.Parallel()
	b := setup(t, meshworker.Config{AllowExec: true})
	start := time.Now()
	var r execResult
	// The background sleep keeps stdout open; the call must still return
	// when the command exits, and take the sleep with it.
	b.ok(t, "exec", map[string]any{"command": []string{"sh", "-c", "echo $$; sleep 30 &"}}, &r)
	if took := time.Since(start); took > 10*time.Second || r.TimedOut || r.ExitCode != 0 {
		t.Errorf("took %v, result %+v", took, r)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(r.Stdout))
	if err != nil {
		t.Fatalf("stdout %q: %v", r.Stdout, err)
	}
	waitGroupGone(t, pgid)
}

// waitGroupGone polls /proc until no live (non-zombie) process is in the
// process group, and fails after a deadline.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		alive := groupMembers(t, pgid)
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of group %d survived", alive, pgid)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc; there is no signal to wait on
	}
}

func groupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}
