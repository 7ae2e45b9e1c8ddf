package mcpserver_test

import (
	"archive/tar"
	"bytes"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/workers"
)

// standIns are the test images put in place of catalog images that cannot be
// built without a registry and npm: the agent workers' user images carry the
// real agent CLIs. Each stand-in is the same mesh-exec with a fake CLI that
// speaks the real one's headless protocol (make test-images). Every other
// catalog image is tested as the catalog names it.
var standIns = map[string]string{
	"meshwork/claude-worker:latest": "meshwork/claude-worker-fake:test",
	"meshwork/codex-worker:latest":  "meshwork/codex-worker-fake:test",
}

// Every worker of the embedded catalog spawns from its image, runs an action
// over MCP, and stops with its workspace deleted. A new catalog entry is a
// new case; one whose image nothing builds fails here.
func TestEveryCatalogWorkerSpawns(t *testing.T) {
	t.Parallel()
	catalog, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	entries := catalog.Entries()
	images := map[string]string{} // by worker: the image it runs
	b := &bundle{
		images: map[string]string{},
		// The fake claude, like the real one, refuses to run logged out.
		agentEnv: []string{"ANTHROPIC_API_KEY=test-key-not-real"},
		egress:   true, // the agent workers are egress workers
	}
	for _, e := range entries {
		d := &e.Definition
		image, target := d.Image, "make offline-images"
		if s, ok := standIns[image]; ok {
			b.images[d.ID], image, target = s, s, "make test-images"
		}
		images[d.ID] = image
		if !dockertest.HasImage(image) {
			t.Errorf("worker %s: image %s is missing: run `%s`", d.ID, image, target)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	setupWith(t, b)
	cs := b.client(t, aliceToken)

	for _, e := range entries {
		d := &e.Definition
		t.Run(d.ID, func(t *testing.T) {
			t.Parallel()
			journey := "catalog-" + d.ID
			namesItsUser(t, images[d.ID], d.Isolation.User, b.labels["meshwork.test"])
			sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": d.ID, "journey_id": journey})
			if sp["state"] != "active" {
				t.Fatalf("spawn: %v", sp)
			}
			probe(t, cs, journey, d)
			st := must(t, cs, "stop_worker", map[string]any{"journey_id": journey, "workspace": "delete"})
			if st["state"] != "deleted" {
				t.Errorf("stop: %v", st)
			}
			for _, obj := range []string{sp["container_id"].(string), sp["workspace"].(string)} {
				if exec.Command("docker", "inspect", obj).Run() == nil {
					t.Errorf("%s is still there after stop_worker with workspace delete", obj)
				}
			}
		})
	}
}

// namesItsUser checks that image's /etc/passwd and /etc/group name the
// worker's uid and gid ("uid:gid"). The engine looks up the owner of every
// file it archives from a workspace (an export, a diff, an archive) in the
// image's own files, and a uid it cannot name costs it a failed lookup per
// file: two to four times the whole export's time (docs/benchmarks.md).
func namesItsUser(t *testing.T, image, user, label string) {
	t.Helper()
	uid, gid, ok := strings.Cut(user, ":")
	if !ok {
		gid = uid
	}
	id := dockertest.Docker(t, "create", "--label", "meshwork.test="+label, image)
	defer func() { _ = exec.Command("docker", "rm", id).Run() }()
	for _, f := range []struct{ path, id string }{{"/etc/passwd", uid}, {"/etc/group", gid}} {
		out, err := exec.Command("docker", "cp", id+":"+f.path, "-").Output()
		if err != nil {
			t.Errorf("image %s has no %s (%v): the engine cannot name the worker's files' owner (rebuild it: make offline-images)", image, f.path, err)
			continue
		}
		tr := tar.NewReader(bytes.NewReader(out))
		if _, err := tr.Next(); err != nil {
			t.Fatalf("docker cp %s of %s: %v", f.path, image, err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if !namesID(content, f.id) {
			t.Errorf("image %s: %s names no id %s (the worker's user %q): the engine cannot name the worker's files' owner (rebuild it: make offline-images)\n%s", image, f.path, f.id, user, content)
		}
	}
}

// namesID reports whether an /etc/passwd or /etc/group file has an entry
// whose id (the third field) is id.
func namesID(file []byte, id string) bool {
	for line := range strings.Lines(string(file)) {
		if fields := strings.Split(strings.TrimSpace(line), ":"); len(fields) >= 3 && fields[2] == id {
			return true
		}
	}
	return false
}

var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// probe runs an action a worker of this kind and these tools allows, and
// checks its result: the most telling one it has.
func probe(t *testing.T, cs *mcp.ClientSession, journey string, d *meshtype.Definition) {
	t.Helper()
	run := func(action map[string]any) map[string]any {
		t.Helper()
		r := must(t, cs, "execute_in_worker", execArgs(journey, action))
		if r["executed"] != true {
			t.Fatalf("%v: %v", action, r)
		}
		out, _ := r["output"].(map[string]any)
		return out
	}
	has := func(tool string) bool { return slices.Contains(d.Tools, tool) }

	switch {
	case d.Kind == meshtype.KindAgent:
		out := run(map[string]any{"type": "task", "task": "Say hello"})
		md, _ := out["metadata"].(map[string]any)
		session, _ := out["session_id"].(string)
		if !uuidPattern.MatchString(session) || out["output"] == "" || md["backend"] != d.Agent.Backend || md["is_error"] != false {
			t.Errorf("task: %v", out)
		}

	case d.Kind == meshtype.KindMCP && has("echo"):
		out := run(map[string]any{"type": "tool", "tool": "echo", "arguments": map[string]any{"text": "hello from the catalog test"}})
		if !strings.Contains(mustJSON(t, out), "hello from the catalog test") {
			t.Errorf("echo: %v", out)
		}

	case d.Kind == meshtype.KindBuiltin && has("exec") && has("write") && slices.Contains(d.Constraints.Commands, "go test"):
		// go test compiles a test binary and runs it: in the hardened
		// container (read-only root, noexec /tmp, no network) that needs the
		// image's Go settings, which put GOTMPDIR in the workspace.
		run(map[string]any{"type": "write", "target": "go.mod", "content": "module meshwork.test/probe\n\ngo 1.19\n"})
		run(map[string]any{"type": "write", "target": "probe_test.go", "content": probeTest})
		out := run(map[string]any{"type": "exec", "command": []any{"go", "test", "-v", "-count=1", "./..."}})
		stdout, _ := out["stdout"].(string)
		if out["exit_code"] != 0.0 || !strings.Contains(stdout, "--- PASS: TestProbe") ||
			!strings.Contains(stdout, "probe: uid 65532, binary /workspace/.meshwork/go/tmp/go-build") {
			t.Errorf("go test: %v", out)
		}
		t.Logf("go test in %s:\n%s", d.Image, stdout)

	case d.Kind == meshtype.KindBuiltin && has("git_status"):
		if has("git_init") {
			run(map[string]any{"type": "tool", "tool": "git_init", "arguments": map[string]any{}})
		}
		if out := run(map[string]any{"type": "tool", "tool": "git_status", "arguments": map[string]any{}}); out["branch"] != "main" {
			t.Errorf("git_status: %v", out)
		}

	case d.Kind == meshtype.KindBuiltin && has("list"):
		if out := run(map[string]any{"type": "list", "target": "."}); out["entries"] == nil {
			t.Errorf("list: %v", out)
		}

	default:
		t.Fatalf("no probe for worker %s (kind %s, tools %v): add one to probe", d.ID, d.Kind, d.Tools)
	}
}

// probeTest is the test go test runs in the shell worker; it says who ran it
// and from where, so the result shows the binary ran in the workspace.
const probeTest = `package probe

import (
	"os"
	"testing"
)

func TestProbe(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe: uid %d, binary %s", os.Getuid(), bin)
}
`
