package claude

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

// fakePkg is the fake claude, a test double under testdata (never part of
// ./..., never a default).
const fakePkg = "github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeclaude"

// fake is the fake claude, built once per test binary by fakeClaude.
var fake struct {
	once sync.Once
	dir  string
	path string
	skip string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fake.dir != "" {
		_ = os.RemoveAll(fake.dir)
	}
	os.Exit(code)
}

// fakeClaude returns the path of the built fake claude, building it on
// first use (static, as the test image has it).
func fakeClaude(t testing.TB) string {
	t.Helper()
	fake.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			fake.skip = fmt.Sprintf("building the fake claude needs the go command on PATH: %v", err)
			return
		}
		if fake.dir, fake.err = os.MkdirTemp("", "fakeclaude-"); fake.err != nil {
			return
		}
		fake.path = filepath.Join(fake.dir, "claude")
		cmd := exec.Command(goBin, "build", "-o", fake.path, fakePkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fake.err = fmt.Errorf("building the fake claude: %w\n%s", err, out)
		}
	})
	if fake.skip != "" {
		t.Skip(fake.skip)
	}
	if fake.err != nil {
		t.Fatal(fake.err)
	}
	return fake.path
}

// env is the environment the fake runs with in these tests: a HOME of its
// own, a dummy API key (the fake only checks that one is set) and extra;
// nothing of the developer's claude or fake settings.
func env(home string, extra ...string) []string {
	var out []string
	for _, kv := range backendtest.BaseEnv(home) {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains([]string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "FAKE_CLAUDE_SCRIPT", "FAKE_CLAUDE_LOG"}, name) {
			out = append(out, kv)
		}
	}
	return append(append(out, "ANTHROPIC_API_KEY=test-dummy-key"), extra...)
}

// loggedOut is env without credentials.
func loggedOut(home string, extra ...string) []string {
	return slices.DeleteFunc(env(home, extra...), func(kv string) bool {
		return strings.HasPrefix(kv, "ANTHROPIC_API_KEY=")
	})
}

// writeScript writes a fake claude script and returns the FAKE_CLAUDE_SCRIPT
// entry naming it.
func writeScript(t *testing.T, script any) string {
	t.Helper()
	b, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return "FAKE_CLAUDE_SCRIPT=" + path
}

// runFake runs the fake claude with args in dir and parses its output.
func runFake(t *testing.T, dir string, env []string, args ...string) backendtest.Process {
	t.Helper()
	return backendtest.Run(t, New(Config{}).NewParser(backend.Request{}), append([]string{fakeClaude(t)}, args...), dir, env)
}

// runBackend runs req through the backend's argv with the fake claude.
func runBackend(t *testing.T, req backend.Request, env []string) backendtest.Process {
	t.Helper()
	b := New(Config{Binary: fakeClaude(t)})
	argv, err := b.Command(req)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	return backendtest.Run(t, b.NewParser(req), argv, req.Repository, env)
}

// headless is the start of every argv the backend builds.
var headless = []string{"-p", "--output-format", "stream-json", "--verbose"}
