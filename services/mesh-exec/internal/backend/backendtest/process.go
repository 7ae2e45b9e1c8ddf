package backendtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/procgroup"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// runTimeout bounds one run of a fake CLI, so a broken fake fails the test
// instead of hanging it.
const runTimeout = 2 * time.Minute

// Process is one finished run of a CLI.
type Process struct {
	Argv     []string
	Stdout   []string        // the lines of stdout, as printed
	Events   []backend.Event // what the parser made of them, in order
	Result   backend.Result  // the parser's Finish
	ExitCode int
	Stderr   string
}

// Run runs argv the way mesh-exec's runner does (in dir, with env, stdin
// /dev/null, in its own process group), feeds stdout to p line by line and
// returns what came out, with p.Finish's result. It fails the test when the
// process cannot be run or runs for more than two minutes.
func Run(t testing.TB, p backend.Parser, argv []string, dir string, env []string) Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, env, nil
	// A group, so that a timeout also ends children that hold stdout open.
	procgroup.Lead(cmd)
	procgroup.CancelWith(cmd, syscall.SIGKILL)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("running %q: %v", argv, err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("running %q: %v", argv, err)
	}
	out := Process{Argv: argv}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		out.Stdout = append(out.Stdout, sc.Text())
		out.Events = append(out.Events, p.Line(sc.Bytes())...)
	}
	scanErr := sc.Err()
	waitErr := cmd.Wait()
	procgroup.Kill(cmd) // leftovers
	if ctx.Err() != nil {
		t.Fatalf("%q did not finish within %s (stdout so far: %q, stderr: %q)", argv, runTimeout, out.Stdout, stderr.String())
	}
	if scanErr != nil {
		t.Fatalf("reading the stdout of %q: %v", argv, scanErr)
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		t.Fatalf("running %q: %v", argv, waitErr)
	}
	out.ExitCode = cmd.ProcessState.ExitCode()
	out.Stderr = stderr.String()
	out.Result = p.Finish(out.ExitCode, out.Stderr)
	return out
}

// BaseEnv is the environment the suite runs CLIs with: the test's own,
// without the variables that say "inside Claude Code" (mesh-exec's runner
// drops them too), with HOME and the XDG base directories moved into home,
// so that sessions and settings stay in the test's directory.
func BaseEnv(home string) []string {
	drop := map[string]bool{
		"HOME": true, "CLAUDECODE": true, "CLAUDE_CODE_ENTRYPOINT": true,
		"XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true, "XDG_STATE_HOME": true, "XDG_CACHE_HOME": true,
	}
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !drop[name] {
			env = append(env, kv)
		}
	}
	return append(env,
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
	)
}
