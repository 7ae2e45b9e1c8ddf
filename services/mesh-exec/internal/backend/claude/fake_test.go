package claude

// Tests of the fake claude (services/mesh-exec/testdata/fakeclaude): its
// command-line rules, sessions and output, checked against the captures of
// the real CLI and parsed with the backend's parser, which proves the two
// agree.

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

func TestFakeFlagRules(t *testing.T) {
	t.Parallel()
	const id = "214248d1-7307-4c48-a6bd-441352495a86"
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string // exact, or with a trailing "…": a prefix
		stdout string
	}{
		{name: "interactive", args: []string{"hi"}, code: 1, stderr: "fake claude: interactive mode is not implemented; use -p/--print"},
		{
			name: "stream-json needs verbose", args: []string{"-p", "--output-format", "stream-json", "hi"}, code: 1,
			stderr: "Error: When using --print, --output-format=stream-json requires --verbose",
		},
		{
			name: "stream-json needs verbose, inline value", args: []string{"--print", "--output-format=stream-json", "hi"}, code: 1,
			stderr: "Error: When using --print, --output-format=stream-json requires --verbose",
		},
		{
			name: "session id must be a UUID", args: []string{"-p", "--session-id", "abc", "hi"}, code: 1,
			stderr: "Error: Invalid session ID. Must be a valid UUID.",
		},
		{
			name: "session id with resume needs fork", args: []string{"-p", "--session-id", id, "--resume", id, "hi"}, code: 1,
			stderr: "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified.",
		},
		{
			name: "session id with continue needs fork", args: []string{"-p", "--session-id", id, "-c", "hi"}, code: 1,
			stderr: "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified.",
		},
		{name: "unknown option", args: []string{"-p", "--frobnicate", "hi"}, code: 1, stderr: "error: unknown option '--frobnicate'"},
		{name: "unknown short option", args: []string{"-p", "-z", "hi"}, code: 1, stderr: "error: unknown option '-z'"},
		{name: "real option the fake lacks", args: []string{"-p", "--effort", "high", "hi"}, code: 1, stderr: "fake claude: option --effort is not implemented"},
		{
			name: "invalid choice", args: []string{"-p", "--output-format", "xml", "hi"}, code: 1,
			stderr: "error: option '--output-format <format>' argument 'xml' is invalid. Allowed choices are text, json, stream-json.",
		},
		{name: "missing value", args: []string{"-p", "hi", "--model"}, code: 1, stderr: "error: option '--model <model>' argument missing"},
		{name: "two prompts", args: []string{"-p", "hi", "there"}, code: 1, stderr: "error: too many arguments. Expected 1 argument but got 2."},
		{
			name: "variadic option swallows the prompt", args: []string{"-p", "--allowedTools", "Read", "hi"}, code: 1,
			stderr: "Error: Input must be provided either through stdin or as a prompt argument when using --print",
		},
		{name: "subcommand", args: []string{"-p", "--", "doctor"}, code: 1, stderr: "fake claude: the \"doctor\" subcommand is not implemented…"},
		{name: "no prompt", args: []string{"-p"}, code: 1, stderr: "Error: Input must be provided either through stdin or as a prompt argument when using --print"},
		{name: "resume picker", args: []string{"-p", "--resume", "--", "hi"}, code: 1, stderr: "fake claude: --resume without a session ID…"},
		{name: "version", args: []string{"--version"}, code: 0, stdout: "2.1.330 (Claude Code)"},
		{name: "text output", args: []string{"-p", "--", "hi"}, code: 0, stdout: "ok: hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := runFake(t, t.TempDir(), env(t.TempDir()), tt.args...)
			stderr := strings.TrimSuffix(p.Stderr, "\n")
			if prefix, ok := strings.CutSuffix(tt.stderr, "…"); ok {
				if !strings.HasPrefix(stderr, prefix) {
					t.Errorf("stderr = %q, want it to start with %q", stderr, prefix)
				}
			} else if stderr != tt.stderr {
				t.Errorf("stderr = %q, want %q", stderr, tt.stderr)
			}
			if p.ExitCode != tt.code {
				t.Errorf("exit code %d, want %d", p.ExitCode, tt.code)
			}
			if got := strings.Join(p.Stdout, "\n"); got != tt.stdout {
				t.Errorf("stdout = %q, want %q", got, tt.stdout)
			}
		})
	}
}

// projectDir is where the fake (and the real CLI) keeps cwd's sessions.
func projectDir(home, cwd string) string {
	name := []byte(cwd)
	for i, c := range name {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			name[i] = '-'
		}
	}
	return filepath.Join(home, ".claude", "projects", string(name))
}

func lineCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the session file: %v", err)
	}
	return bytes.Count(b, []byte("\n"))
}

// initField returns a field of the init event on stdout.
func initField(t *testing.T, stdout []string, field string) string {
	t.Helper()
	for _, line := range stdout {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) == nil && ev["type"] == "system" && ev["subtype"] == "init" {
			s, _ := ev[field].(string)
			return s
		}
	}
	t.Fatalf("no init event in %q", stdout)
	return ""
}

func TestFakeSessions(t *testing.T) {
	t.Parallel()
	home, repo, other := t.TempDir(), t.TempDir(), t.TempDir()
	e := env(home)
	run := func(dir string, args ...string) backendtest.Process {
		t.Helper()
		p := runFake(t, dir, e, append(append(slices.Clone(headless), args...), "--", "hello")...)
		if p.Result.IsError {
			t.Fatalf("run %q failed: %+v\nstderr %s", args, p.Result, p.Stderr)
		}
		return p
	}

	first := run(repo)
	id := first.Result.SessionID
	file := filepath.Join(projectDir(home, repo), id+".jsonl")
	if n := lineCount(t, file); n != 1 {
		t.Errorf("%s has %d lines after one turn, want 1", file, n)
	}

	again := run(repo, "--resume", id)
	if again.Result.SessionID != id || lineCount(t, file) != 2 {
		t.Errorf("resume: session %q (want %q), %d lines (want 2)", again.Result.SessionID, id, lineCount(t, file))
	}

	// From another directory: found by scanning the projects, like the real
	// CLI (resume-other-cwd.jsonl); init reports the new cwd.
	elsewhere := run(other, "-r", id)
	if elsewhere.Result.SessionID != id || lineCount(t, file) != 3 {
		t.Errorf("resume from another cwd: session %q (want %q), %d lines (want 3)", elsewhere.Result.SessionID, id, lineCount(t, file))
	}
	if cwd := initField(t, elsewhere.Stdout, "cwd"); cwd != other {
		t.Errorf("init cwd = %q, want %q", cwd, other)
	}
	if _, err := os.Stat(filepath.Join(projectDir(home, other), id+".jsonl")); err == nil {
		t.Error("resuming from another cwd copied the session instead of continuing it")
	}

	// --fork-session: a new session holding the history.
	fork := run(repo, "--resume", id, "--fork-session")
	if fork.Result.SessionID == id || !uuidRE.MatchString(fork.Result.SessionID) {
		t.Errorf("fork returned session %q, want a new UUID", fork.Result.SessionID)
	}
	if n := lineCount(t, filepath.Join(projectDir(home, repo), fork.Result.SessionID+".jsonl")); n != 4 {
		t.Errorf("the fork has %d lines, want 4 (3 copied, 1 new)", n)
	}
	named := "5b0f1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d"
	if p := run(repo, "--resume", id, "--fork-session", "--session-id", named); p.Result.SessionID != named {
		t.Errorf("fork with --session-id returned %q, want %q", p.Result.SessionID, named)
	}

	// --continue takes the most recent session of the cwd, when it has one.
	third := t.TempDir()
	if none := runFake(t, third, e, append(slices.Clone(headless), "-c", "--", "hi")...); none.ExitCode != 1 || strings.TrimSpace(none.Stderr) != "No conversation found to continue" {
		t.Errorf("--continue without a session: exit %d, stderr %q", none.ExitCode, none.Stderr)
	}
	latest := run(third).Result.SessionID
	if p := run(third, "-c"); p.Result.SessionID != latest {
		t.Errorf("--continue returned %q, want %q", p.Result.SessionID, latest)
	}

	// --session-id names a new session, once.
	chosen := "0d9c8b7a-6f5e-4d3c-9b2a-1f0e9d8c7b6a"
	if p := run(repo, "--session-id", chosen); p.Result.SessionID != chosen {
		t.Errorf("--session-id: got session %q, want %q", p.Result.SessionID, chosen)
	}
	taken := runFake(t, repo, e, append(slices.Clone(headless), "--session-id", chosen, "--", "hi")...)
	if taken.ExitCode != 1 || strings.TrimSpace(taken.Stderr) != "Error: Session ID "+chosen+" is already in use." {
		t.Errorf("reusing --session-id: exit %d, stderr %q", taken.ExitCode, taken.Stderr)
	}

	// --no-session-persistence writes nothing.
	ghost := run(t.TempDir(), "--no-session-persistence")
	if matches, _ := filepath.Glob(filepath.Join(home, ".claude", "projects", "*", ghost.Result.SessionID+".jsonl")); len(matches) != 0 {
		t.Errorf("--no-session-persistence wrote %q", matches)
	}
}

// keyPaths lists the object keys of a JSON value, recursively ("a.b"),
// without descending into arrays or into maps keyed by data (modelUsage).
func keyPaths(t *testing.T, line string) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("not JSON: %q", line)
	}
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			out = append(out, prefix+k)
			if k != "modelUsage" && k != "model_usage_since_last_result" && k != "input" {
				walk(prefix+k+".", m[k])
			}
		}
	}
	walk("", v)
	return out
}

func fixtureLines(t *testing.T, name string) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(string(readFixture(t, name))), "\n")
}

// TestFakeMatchesTheCaptures runs the fake where the captures ran the real
// CLI and compares the shapes of their output.
func TestFakeMatchesTheCaptures(t *testing.T) {
	t.Parallel()

	t.Run("not logged in", func(t *testing.T) {
		t.Parallel()
		home, repo := t.TempDir(), t.TempDir()
		p := runFake(t, repo, loggedOut(home), append(slices.Clone(headless), "--", "say hi")...)
		want := fixtureLines(t, "print-stream-json-not-logged-in.jsonl")
		if len(p.Stdout) != len(want) {
			t.Fatalf("%d lines, want %d: %q", len(p.Stdout), len(want), p.Stdout)
		}
		for i := range want {
			if got, w := keyPaths(t, p.Stdout[i]), keyPaths(t, want[i]); !slices.Equal(got, w) {
				t.Errorf("line %d has keys\n%q\nwant\n%q", i, got, w)
			}
		}
		if p.ExitCode != 1 || !errors.Is(p.Result.Err, backend.ErrNotLoggedIn) {
			t.Errorf("exit %d, result %+v; want 1 and ErrNotLoggedIn", p.ExitCode, p.Result)
		}
		if s := initField(t, p.Stdout, "apiKeySource"); s != "none" {
			t.Errorf("apiKeySource = %q, want none", s)
		}
		// The session exists all the same: the captures resumed it.
		if n := lineCount(t, filepath.Join(projectDir(home, repo), p.Result.SessionID+".jsonl")); n != 1 {
			t.Errorf("the session file has %d lines, want 1", n)
		}
	})

	t.Run("not logged in, json", func(t *testing.T) {
		t.Parallel()
		p := runFake(t, t.TempDir(), loggedOut(t.TempDir()), "-p", "--output-format", "json", "--", "say hi")
		want := fixtureLines(t, "print-json-not-logged-in.json")
		if len(p.Stdout) != 1 || !slices.Equal(keyPaths(t, p.Stdout[0]), keyPaths(t, want[0])) {
			t.Errorf("stdout %q does not have the shape of %q", p.Stdout, want)
		}
		if p.ExitCode != 1 || !errors.Is(p.Result.Err, backend.ErrNotLoggedIn) {
			t.Errorf("exit %d, result %+v; want 1 and ErrNotLoggedIn", p.ExitCode, p.Result)
		}
	})

	t.Run("unknown session", func(t *testing.T) {
		t.Parallel()
		const unknown = "00000000-0000-4000-8000-000000000000"
		p := runFake(t, t.TempDir(), loggedOut(t.TempDir()), append(slices.Clone(headless), "--resume", unknown, "--", "say hi")...)
		want := fixtureLines(t, "resume-unknown-session.jsonl")
		if len(p.Stdout) != 1 || !slices.Equal(keyPaths(t, p.Stdout[0]), keyPaths(t, want[0])) {
			t.Errorf("stdout %q does not have the shape of %q", p.Stdout, want)
		}
		if wantStderr := string(readFixture(t, "resume-unknown-session.stderr.txt")); p.Stderr != wantStderr {
			t.Errorf("stderr = %q, want %q", p.Stderr, wantStderr)
		}
		if p.ExitCode != 1 || !errors.Is(p.Result.Err, backend.ErrSessionNotFound) || p.Result.SessionID != unknown {
			t.Errorf("exit %d, result %+v; want 1, ErrSessionNotFound, session %s", p.ExitCode, p.Result, unknown)
		}
	})

	t.Run("success", func(t *testing.T) {
		t.Parallel()
		p := runFake(t, t.TempDir(), env(t.TempDir()), append(slices.Clone(headless), "--", "say hi")...)
		capture := fixtureLines(t, "print-stream-json-not-logged-in.jsonl")
		if len(p.Stdout) != 3 {
			t.Fatalf("%d lines, want init, assistant, result: %q", len(p.Stdout), p.Stdout)
		}
		for i, drop := range [][]string{nil, {"error", "is_api_error_message"}, nil} {
			want := slices.DeleteFunc(keyPaths(t, capture[i]), func(k string) bool { return slices.Contains(drop, k) })
			if got := keyPaths(t, p.Stdout[i]); !slices.Equal(got, want) {
				t.Errorf("line %d has keys\n%q\nwant\n%q", i, got, want)
			}
		}
		var result map[string]any
		if err := json.Unmarshal([]byte(p.Stdout[2]), &result); err != nil {
			t.Fatal(err)
		}
		if result["is_error"] != false || result["subtype"] != "success" || result["result"] != "ok: say hi" || p.ExitCode != 0 {
			t.Errorf("result %v, exit %d; want is_error false, subtype success, result \"ok: say hi\", exit 0", result, p.ExitCode)
		}
		if p.Result.CostUSD <= 0 || p.Result.NumTurns != 1 || p.Result.InputTokens == 0 || p.Result.OutputTokens == 0 {
			t.Errorf("result %+v, want a cost, one turn and token counts", p.Result)
		}
		if s := initField(t, p.Stdout, "apiKeySource"); s != "ANTHROPIC_API_KEY" {
			t.Errorf("apiKeySource = %q, want ANTHROPIC_API_KEY", s)
		}
	})
}
