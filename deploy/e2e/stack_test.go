//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/dockertest"
)

// images the stack is brought up from: no registry is needed for any.
const (
	fakeAgentImage  = "meshwork/claude-worker-fake:test"
	realAgentImage  = "meshwork/claude-worker:latest"
	offlinePostgres = "meshwork/postgres-offline:15"
)

// coreServices are what the test starts: the stack without lgtm (its image
// needs a registry), plus the test's OTLP receiver.
var coreServices = []string{"postgres", "migrate", "marketplace", "marketplace-2", "mesh-exec", "orchestrator", "otlp-sink"}

// stack is one compose project started by the test.
type stack struct {
	t       *testing.T
	compose []string // the compose command: docker compose or docker-compose
	project string
	repo    string
	env     []string
	dir     string // the test's files, bind-mounted read-only
	// sourcesDir is MESHWORK_SOURCES_DIR: repositories spawn_worker takes,
	// at /sources in the marketplace.
	sourcesDir string
	tokens     map[string]string
	ports      map[string]string // service -> host:port on loopback
	meshctl    string
	markURL    string
	mark2URL   string // the second marketplace replica
	orchURL    string
	sinkURL    string
	meshURL    string
	started    time.Time
	dumpLogs   bool
}

// composeCommand is `docker compose` where Compose v2 is installed, else the
// standalone docker-compose (1.29 on Debian).
func composeCommand(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	t.Fatal("neither `docker compose` nor docker-compose is installed")
	return nil
}

func requireImages(t *testing.T, images ...string) {
	t.Helper()
	for _, img := range images {
		dockertest.RequireImage(t, img, "run `make e2e` (it builds the offline images)")
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// newStack writes the test's files and brings the core services up; the
// stack is taken down (volumes too) when the test ends, whatever happens.
func newStack(t *testing.T) *stack {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	postgresImage := os.Getenv("POSTGRES_IMAGE")
	if postgresImage == "" {
		postgresImage = offlinePostgres
	}
	requireImages(t, postgresImage, fakeAgentImage, "meshwork/otlp-sink:test",
		"meshwork/marketplace:latest", "meshwork/orchestrator:latest", "meshwork/worker:latest", "meshwork/shell-worker:latest")
	s := &stack{
		t: t, compose: composeCommand(t), project: "meshwork-e2e-" + randomHex(4), repo: repo,
		dir:     t.TempDir(),
		tokens:  map[string]string{"client": "e2e-client-" + randomHex(16), "orchestrator": "e2e-orch-" + randomHex(16), "mesh": "e2e-mesh-" + randomHex(16)},
		ports:   map[string]string{"marketplace": freePort(t), "marketplace-2": freePort(t), "orchestrator": freePort(t)},
		meshctl: filepath.Join(repo, "bin", "linux_amd64", "meshctl"),
		started: time.Now(),
	}
	if _, err := os.Stat(s.meshctl); err != nil {
		t.Fatalf("meshctl is not built (%v): run `make e2e`", err)
	}
	// The marketplace runs as a non-root user and reads these files.
	if err := os.Chmod(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.writeCatalog()
	// The repositories spawn_worker may take, as MESHWORK_SOURCES_DIR.
	s.sourcesDir = filepath.Join(s.dir, "sources")
	if err := os.MkdirAll(s.sourcesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every agent turn of mesh-exec's fake claude takes a while, so the
	// orchestrator can be killed while a node is running.
	s.writeFile("script.json", `{"steps": [{"text": "Working on it."}, {"sleep_ms": 2500}]}`)

	var gid syscall.Stat_t
	if err := syscall.Stat("/var/run/docker.sock", &gid); err != nil {
		t.Fatalf("the Docker socket: %v", err)
	}
	s.env = append(os.Environ(),
		"POSTGRES_IMAGE="+postgresImage,
		"MESH_EXEC_IMAGE="+fakeAgentImage,
		"MESHWORK_CLIENT_TOKEN="+s.tokens["client"],
		"MESHWORK_ORCHESTRATOR_TOKEN="+s.tokens["orchestrator"],
		"MESH_EXEC_TOKEN="+s.tokens["mesh"],
		"ANTHROPIC_API_KEY=e2e-fake-claude-accepts-any-key",
		"CLAUDE_CODE_OAUTH_TOKEN=",
		"MARKETPLACE_PORT="+s.ports["marketplace"],
		"MARKETPLACE_2_PORT="+s.ports["marketplace-2"],
		// The second marketplace replica (deploy/compose.yaml), in every
		// compose command: up, logs and down.
		"COMPOSE_PROFILES=replicas",
		"ORCHESTRATOR_PORT="+s.ports["orchestrator"],
		"MESHWORK_BIND=127.0.0.1",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://otlp-sink:4318",
		"OTEL_METRIC_EXPORT_INTERVAL=1000",
		fmt.Sprintf("DOCKER_GID=%d", gid.Gid),
		"E2E_LABEL="+s.project,
		"E2E_DIR="+s.dir,
		// The project's own egress network, so a stack on this host keeps
		// its own.
		"MESHWORK_EGRESS_NETWORK="+s.project+"-egress",
		"MESHWORK_SOURCES_DIR="+s.sourcesDir,
	)
	t.Cleanup(s.teardown)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s.dumpLogs = true
	s.run(ctx, t, append([]string{"up", "-d"}, coreServices...)...)
	s.markURL = "http://127.0.0.1:" + s.ports["marketplace"]
	s.mark2URL = "http://127.0.0.1:" + s.ports["marketplace-2"]
	s.orchURL = "http://127.0.0.1:" + s.ports["orchestrator"]
	s.sinkURL = "http://" + s.port(ctx, t, "otlp-sink", "4318")
	s.meshURL = "http://" + s.port(ctx, t, "mesh-exec", "8081")
	for _, u := range []string{s.markURL + "/healthz", s.mark2URL + "/healthz", s.orchURL + "/healthz", s.sinkURL + "/healthz", s.meshURL + "/healthz"} {
		s.waitHTTP(ctx, t, u)
	}
	s.dumpLogs = false
	t.Logf("stack %s up in %s", s.project, time.Since(s.started).Round(time.Second))
	return s
}

func (s *stack) writeFile(name, content string) {
	s.t.Helper()
	if err := os.WriteFile(filepath.Join(s.dir, name), []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// writeCatalog copies the built-in worker catalog with the Claude Code
// worker on the fake agent image: the writer role of research_pipeline runs
// in that worker, spawned by the marketplace through the Docker socket.
func (s *stack) writeCatalog() {
	s.t.Helper()
	dst := filepath.Join(s.dir, "catalog")
	if err := os.MkdirAll(filepath.Join(dst, "prompts"), 0o755); err != nil {
		s.t.Fatal(err)
	}
	swapped := false
	err := filepath.WalkDir(filepath.Join(s.repo, "workers"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (!strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".md")) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "image: "+realAgentImage) {
			b = []byte(strings.ReplaceAll(string(b), "image: "+realAgentImage, "image: "+fakeAgentImage))
			swapped = true
		}
		rel, _ := filepath.Rel(filepath.Join(s.repo, "workers"), path)
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	if !swapped {
		s.t.Fatalf("no worker in workers/ uses %s: the test's catalog would run the real claude", realAgentImage)
	}
}

// composeArgs are the compose command and its project flags.
func (s *stack) composeArgs(args ...string) []string {
	base := append([]string{}, s.compose...)
	base = append(base, "-p", s.project,
		"-f", filepath.Join(s.repo, "deploy", "compose.yaml"),
		"-f", filepath.Join(s.repo, "deploy", "e2e", "compose.e2e.yaml"))
	return append(base, args...)
}

// run runs a compose command and fails the test if it fails.
func (s *stack) run(ctx context.Context, t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.try(ctx, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (s *stack) try(ctx context.Context, args ...string) (string, error) {
	argv := s.composeArgs(args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = s.env
	cmd.Dir = s.repo
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// port is the loopback address a service's container port is published on.
func (s *stack) port(ctx context.Context, t testing.TB, service, port string) string {
	t.Helper()
	out := strings.TrimSpace(s.run(ctx, t, "port", service, port))
	if _, p, err := net.SplitHostPort(out); err == nil && p != "0" {
		return "127.0.0.1:" + p
	}
	t.Fatalf("compose port %s %s: %q", service, port, out)
	return ""
}

func (s *stack) waitHTTP(ctx context.Context, t testing.TB, url string) {
	t.Helper()
	var last error
	for ctx.Err() == nil {
		resp, err := http.Get(url) //nolint:noctx // a short probe
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = errors.New(resp.Status)
		}
		last = err
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200: %v", url, last)
}

// teardown takes the stack down with its volumes and removes anything the
// marketplace spawned for it, found by the test's label; the last subtest
// checks that down -v alone left nothing of the project.
func (s *stack) teardown() {
	if os.Getenv("MESHWORK_E2E_KEEP") != "" {
		s.t.Logf("MESHWORK_E2E_KEEP is set: the stack %s is left running; take it down with\n  %s down -v", s.project, strings.Join(s.composeArgs(), " "))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if s.t.Failed() || s.dumpLogs {
		out, _ := s.try(ctx, "logs", "--no-color", "--tail", "60")
		s.t.Logf("compose logs (last lines of each service):\n%s", out)
	}
	if out, err := s.try(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
		s.t.Errorf("compose down: %v\n%s", err, out)
	}
	// The workers, their volumes and the egress network are the
	// marketplace's, made with its labels.
	dockertest.RemoveLabelled(ctx, "meshwork.test="+s.project)
}

func dockerLines(ctx context.Context, args ...string) []string {
	out, err := exec.CommandContext(ctx, "docker", args...).Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// meshctlRun runs meshctl against the stack's orchestrator and returns its
// stdout and exit code.
func (s *stack) meshctlRun(ctx context.Context, t testing.TB, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, s.meshctl, args...)
	cmd.Env = append(os.Environ(), "MESHCTL_SERVER="+s.orchURL, "MESHCTL_TOKEN="+s.tokens["client"])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("meshctl %s: %v", strings.Join(args, " "), err)
	}
	if stderr.Len() > 0 {
		t.Logf("meshctl %s (exit %d) stderr: %s", strings.Join(args, " "), code, stderr.String())
	}
	return stdout.String(), code
}

// meshctlJSON runs meshctl -o json and decodes its output into out.
func (s *stack) meshctlJSON(ctx context.Context, t testing.TB, out any, args ...string) {
	t.Helper()
	stdout, code := s.meshctlRun(ctx, t, append([]string{"-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("meshctl %s exited %d: %s", strings.Join(args, " "), code, stdout)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		t.Fatalf("meshctl %s: decoding %q: %v", strings.Join(args, " "), stdout, err)
	}
}

func getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return json.Unmarshal(b, out)
}
