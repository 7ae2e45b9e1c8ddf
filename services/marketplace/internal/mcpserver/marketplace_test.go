package mcpserver_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"

	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

func execArgs(journey string, action any) map[string]any {
	return map[string]any{"journey_id": journey, "action": action}
}

// readContent is a read action's file content.
func readContent(res map[string]any) string {
	out, _ := res["output"].(map[string]any)
	content, _ := out["content"].(string)
	return content
}

// Normal use: spawn filesystem_write_v1, write a file, read it back, list, search.
func TestNormalUse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)

	workers := must(t, cs, "list_workers", map[string]any{})
	if n := len(workers["workers"].([]any)); n != 8 {
		t.Errorf("list_workers: %d workers, want 8", n)
	}
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "notes"})
	if sp["state"] != "active" || sp["container_id"] == "" || sp["workspace"] == "" {
		t.Fatalf("spawn: %v", sp)
	}
	w := must(t, cs, "execute_in_worker", execArgs("notes", map[string]any{"type": "write", "target": "docs/today.md", "content": "hello meshwork\nsecond line\n"}))
	if w["executed"] != true || w["action_type"] != "write" {
		t.Fatalf("write: %v", w)
	}
	r := must(t, cs, "execute_in_worker", execArgs("notes", map[string]any{"type": "read", "target": "docs/today.md"}))
	if readContent(r) != "hello meshwork\nsecond line\n" {
		t.Errorf("read back: %v", r)
	}
	l := must(t, cs, "execute_in_worker", execArgs("notes", map[string]any{"type": "list", "target": "docs"}))
	if !strings.Contains(mustJSON(t, l["output"]), "docs/today.md") {
		t.Errorf("list: %v", l)
	}
	s := must(t, cs, "execute_in_worker", execArgs("notes", map[string]any{"type": "search", "pattern": "second"}))
	if !strings.Contains(mustJSON(t, s["output"]), `"line":2`) {
		t.Errorf("search: %v", s)
	}
	st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "notes"})
	if st["state"] != "active" || st["action_count"].(float64) != 4 || st["worker_id"] != "filesystem_write_v1" {
		t.Errorf("state: %v", st)
	}
}

// A refused action never reaches the worker, is audited, and carries the
// exact violation.
func TestRefusedActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "w"})
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_research_v1", "journey_id": "r"})

	big := strings.Repeat("x", 2_000_000)
	res := call(t, cs, "execute_in_worker", execArgs("w", map[string]any{"type": "write", "target": "big.bin", "content": big}))
	if !res.isError || res.out["executed"] != false {
		t.Fatalf("2 MB write: %+v", res.out)
	}
	want := []any{map[string]any{"constraint_id": "max_file_size", "violated": true, "message": "File size 2000000 bytes exceeds limit 1000000 bytes"}}
	if !reflect.DeepEqual(res.out["violations"], want) {
		t.Errorf("violations %v, want %v", res.out["violations"], want)
	}
	if b.rt.execs.Load() != 0 {
		t.Errorf("the worker was called %d times for refused actions", b.rt.execs.Load())
	}
	j, err := b.store.Journey(context.Background(), "alice", "w")
	if err != nil {
		t.Fatal(err)
	}
	audit, err := b.store.Actions(context.Background(), j.UID)
	if err != nil || len(audit) != 1 {
		t.Fatalf("audit rows: %v %v", audit, err)
	}
	if a := audit[0]; a.Decision != store.DecisionRefused || a.ActionType != "write" || a.Target != "big.bin" ||
		a.RequestBytes < 2_000_000 || a.DefinitionHash == "" || len(a.Violations) != 1 {
		t.Errorf("audit row: %+v", a)
	}
	// The file does not exist: reading it (an allowed action) says so.
	if r := call(t, cs, "execute_in_worker", execArgs("w", map[string]any{"type": "read", "target": "big.bin"})); !r.isError {
		t.Errorf("big.bin exists after a refused write: %+v", r)
	}

	for name, tc := range map[string]struct {
		journey string
		action  map[string]any
		ids     []string
	}{
		"write to research worker": {"r", map[string]any{"type": "write", "target": "a.md", "content": "x"}, []string{"tools", "readonly"}},
		"traversal":                {"w", map[string]any{"type": "read", "target": "../../etc/passwd"}, []string{"path_safety"}},
		"absolute":                 {"w", map[string]any{"type": "read", "target": "/etc/passwd"}, []string{"path_safety"}},
		"NUL":                      {"w", map[string]any{"type": "write", "target": "a\u0000.txt", "content": "x"}, []string{"path_safety"}},
		"denied .env":              {"w", map[string]any{"type": "read", "target": "app/.env"}, []string{"denied_paths"}},
		"secret rule":              {"r", map[string]any{"type": "read", "target": "my-secret.txt"}, []string{"no_secrets_in_name"}},
	} {
		execs := b.rt.execs.Load()
		res := call(t, cs, "execute_in_worker", execArgs(tc.journey, tc.action))
		var ids []string
		for _, v := range asList(res.out["violations"]) {
			ids = append(ids, v.(map[string]any)["constraint_id"].(string))
		}
		if !res.isError || !reflect.DeepEqual(ids, tc.ids) || !strings.HasPrefix(res.out["message"].(string), "Constraint violation detected: ") {
			t.Errorf("%s: got %v (%s), want %v", name, ids, res.text, tc.ids)
		}
		if b.rt.execs.Load() != execs {
			t.Errorf("%s: the worker was called", name)
		}
	}
}

// Two callers with different tokens cannot see each other's journeys, and a
// request without a valid token is refused.
func TestCallersAreIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice, bob := b.client(t, aliceToken), b.client(t, bobToken)
	must(t, alice, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "shared-name"})
	must(t, alice, "execute_in_worker", execArgs("shared-name", map[string]any{"type": "write", "target": "alice.txt", "content": "alice's"}))

	for _, tool := range []string{"get_worker_state", "worker_logs", "stop_worker"} {
		if r := call(t, bob, tool, map[string]any{"journey_id": "shared-name"}); !r.isError || !strings.Contains(r.text, `no journey "shared-name"`) {
			t.Errorf("bob %s: %+v", tool, r)
		}
	}
	if r := call(t, bob, "execute_in_worker", execArgs("shared-name", map[string]any{"type": "read", "target": "alice.txt"})); !r.isError || strings.Contains(r.text, "alice's") {
		t.Errorf("bob read alice's file: %+v", r)
	}
	if l := must(t, bob, "list_journeys", map[string]any{}); len(asList(l["journeys"])) != 0 {
		t.Errorf("bob lists %v", l)
	}
	// Bob's journey of the same name is his own.
	must(t, bob, "spawn_worker", map[string]any{"worker_id": "filesystem_research_v1", "journey_id": "shared-name"})
	if l := must(t, alice, "list_journeys", map[string]any{}); len(asList(l["journeys"])) != 1 {
		t.Errorf("alice lists %v", l)
	}

	for name, header := range map[string]string{"no token": "", "unknown token": "Bearer not-a-real-token-000000", "malformed": "Basic abc"} {
		req, _ := http.NewRequest(http.MethodPost, b.url+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
		}
	}
}

// Bad input gets a clear error and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "j"})

	for name, tc := range map[string]struct {
		tool string
		args any
		want string
	}{
		"unknown worker":       {"spawn_worker", map[string]any{"worker_id": "nope_v1", "journey_id": "x"}, `unknown worker "nope_v1"`},
		"abstract worker":      {"spawn_worker", map[string]any{"worker_id": "filesystem_base_v1", "journey_id": "x"}, "unknown worker"},
		"bad journey id":       {"spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "../x"}, "journey_id"},
		"bad mode":             {"spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "x", "mode": "force"}, `mode "force"`},
		"process not enabled":  {"spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "x", "isolation_level": "process"}, "not enabled"},
		"resume unknown":       {"spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "ghost", "mode": "resume"}, `no journey "ghost"`},
		"other worker":         {"spawn_worker", map[string]any{"worker_id": "git_v1", "journey_id": "j"}, "runs worker filesystem_write_v1"},
		"malformed action":     {"execute_in_worker", map[string]any{"journey_id": "j", "action": map[string]any{"type": "read"}}, "/target: missing"},
		"unknown action type":  {"execute_in_worker", map[string]any{"journey_id": "j", "action": map[string]any{"type": "format", "target": "a"}}, `unknown type "format"`},
		"unknown action field": {"execute_in_worker", map[string]any{"journey_id": "j", "action": map[string]any{"type": "read", "target": "a", "mode": "x"}}, "unknown field"},
		"case-smuggled field":  {"execute_in_worker", map[string]any{"journey_id": "j", "action": map[string]any{"type": "read", "target": "a", "Target": "../b"}}, "differ only in case"},
		"unknown argument":     {"execute_in_worker", map[string]any{"journey_id": "j", "action": map[string]any{"type": "list"}, "extra": 1}, `unknown field "extra": arguments are {journey_id, action}`},
		"journey id a number":  {"execute_in_worker", map[string]any{"journey_id": 42, "action": map[string]any{"type": "list"}}, "journey_id: want a string, got a JSON number"},
		"spawn id a number":    {"spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": 42}, `journey_id: type: 42 has type "integer", want "string"`},
		"action not an object": {"execute_in_worker", map[string]any{"journey_id": "j", "action": "read README.md"}, "malformed action"},
		"unknown journey":      {"execute_in_worker", execArgs("nope", map[string]any{"type": "list"}), `no journey "nope"`},
		"bad stop mode":        {"stop_worker", map[string]any{"journey_id": "j", "workspace": "shred"}, `workspace "shred"`},
		"bad list state":       {"list_journeys", map[string]any{"state": "zombie"}, `state "zombie"`},
		"logs tail too large":  {"worker_logs", map[string]any{"journey_id": "j", "tail": 1_000_000}, "above the limit"},
		"describe unknown":     {"describe_worker", map[string]any{"worker_id": "nope_v1"}, `unknown worker "nope_v1"`},
	} {
		r := call(t, cs, tc.tool, tc.args)
		if !r.isError || !strings.Contains(r.text, tc.want) {
			t.Errorf("%s: got isError=%v %q, want an error containing %q", name, r.isError, r.text, tc.want)
		}
	}
	// A type the input schema refuses comes with its code, as every error.
	if r := call(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": 42}); errorCode(r) != string(meshapi.CodeInvalidArgument) {
		t.Errorf("a number for journey_id: %+v, want invalid_argument", r)
	}
	// Nothing changed: one journey, still active, no action executed.
	st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "j"})
	if st["state"] != "active" || st["action_count"].(float64) != 0 || st["worker_id"] != "filesystem_write_v1" {
		t.Errorf("state after bad input: %v", st)
	}
	if l := must(t, cs, "list_journeys", map[string]any{}); len(asList(l["journeys"])) != 1 {
		t.Errorf("journeys after bad input: %v", l)
	}
	// A second normal spawn reports already_active and changes nothing.
	again := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "j"})
	if again["state"] != "already_active" || again["container_id"] != st["container_id"] {
		t.Errorf("duplicate spawn: %v (was %v)", again, st["container_id"])
	}
	// A huge request is refused before it is read whole.
	huge := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"execute_in_worker","arguments":{"journey_id":"j","action":{"type":"write","target":"h","content":"` +
		strings.Repeat("x", 41<<20) + `"}}}}`
	if code := postMCP(t, b.url, aliceToken, huge); code != http.StatusRequestEntityTooLarge {
		t.Errorf("huge request: status %d, want 413", code)
	}
}

// A restarted marketplace keeps journeys usable; a killed container shows as
// orphaned, and resume brings it back with its files.
func TestRestartAndOrphans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "keep"})
	must(t, cs, "execute_in_worker", execArgs("keep", map[string]any{"type": "write", "target": "kept.txt", "content": "still here"}))

	b.start(t) // a new marketplace over the same database and Docker
	cs = b.client(t, aliceToken)
	r := must(t, cs, "execute_in_worker", execArgs("keep", map[string]any{"type": "read", "target": "kept.txt"}))
	if readContent(r) != "still here" {
		t.Fatalf("after restart: %v", r)
	}

	dockertest.Docker(t, "kill", sp["container_id"].(string))
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "keep"}); st["state"] != "orphaned" {
		t.Fatalf("after kill: state %v, want orphaned", st["state"])
	}
	if r := call(t, cs, "execute_in_worker", execArgs("keep", map[string]any{"type": "read", "target": "kept.txt"})); !r.isError || !strings.Contains(r.text, "resume") {
		t.Errorf("action on an orphaned journey: %+v", r)
	}
	back := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "keep", "mode": "resume"})
	if back["state"] != "active" || back["container_id"] == sp["container_id"] || back["workspace"] != sp["workspace"] {
		t.Errorf("resume: %v (was %v)", back, sp)
	}
	r = must(t, cs, "execute_in_worker", execArgs("keep", map[string]any{"type": "read", "target": "kept.txt"}))
	if readContent(r) != "still here" {
		t.Errorf("after resume: %v", r)
	}
	// The counters survive the restart, the kill and the resume.
	st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "keep"})
	if st["action_count"].(float64) != 3 {
		t.Errorf("action count %v, want 3 (counters survive restarts)", st["action_count"])
	}
}

// spawnSlow spawns a shell_v1 journey on a Go module whose one test sleeps
// for ten minutes: `go test .` in it runs until it is stopped.
func spawnSlow(t *testing.T, cs *mcp.ClientSession, journey string) map[string]any {
	t.Helper()
	files := map[string]string{
		"go.mod":       "module slow\n\ngo 1.19\n",
		"slow_test.go": "package slow\n\nimport (\n\t\"testing\"\n\t\"time\"\n)\n\nfunc TestSlow(t *testing.T) { time.Sleep(10 * time.Minute) }\n",
	}
	b64, sum := tarGz(t, []*tar.Header{
		{Name: "go.mod", Typeflag: tar.TypeReg}, {Name: "slow_test.go", Typeflag: tar.TypeReg},
	}, files)
	return must(t, cs, "spawn_worker", map[string]any{
		"worker_id": "shell_v1", "journey_id": journey,
		"source": map[string]any{"archive": map[string]any{"tar_gz_base64": b64, "sha256": sum}},
	})
}

// A definition's action_timeout bounds its commands, in place of the
// worker's default minute: the command is stopped and the action answered
// with timed_out.
func TestActionTimeoutOfADefinition(t *testing.T) {
	t.Parallel()
	requireImage(t, "meshwork/shell-worker:latest")
	b := setupWith(t, &bundle{adjust: func(d *meshtype.Definition) {
		if d.ID == "shell_v1" {
			d.Constraints.ActionTimeout = meshtype.Duration(3 * time.Second)
		}
	}})
	cs := b.client(t, aliceToken)
	spawnSlow(t, cs, "bounded")
	start := time.Now()
	r := must(t, cs, "execute_in_worker", execArgs("bounded", map[string]any{"type": "exec", "command": []string{"go", "test", "."}}))
	took := time.Since(start)
	out, _ := r["output"].(map[string]any)
	if out["timed_out"] != true {
		t.Errorf("go test of a ten-minute test under a 3 s action_timeout: %v", r)
	}
	// The worker's default would have let it run a minute.
	if took > 45*time.Second {
		t.Errorf("the command was stopped after %s, want about 3 s", took)
	}
	t.Logf("stopped after %s: exit %v, timed_out %v", took.Round(time.Millisecond), out["exit_code"], out["timed_out"])
}

// A worker that stops while an action runs in it (killed here; its memory
// limit or a crash do the same): the action is answered with how the
// worker ended, not with what the broken channel saw, and the journey is
// orphaned, to be resumed. The code is unavailable, not not_live: the
// action may have partly run, and a client that retries on not_live must
// not run it twice.
func TestWorkerStoppedUnderAnAction(t *testing.T) {
	t.Parallel()
	requireImage(t, "meshwork/shell-worker:latest")
	b := setup(t)
	cs := b.client(t, aliceToken)
	sp := spawnSlow(t, cs, "slow")
	type answer struct {
		r   result
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		// go test builds, then sleeps: the action runs until the kill
		// (shell_v1's action_timeout is ten minutes).
		r, err := tryCall(cs, "execute_in_worker", execArgs("slow", map[string]any{"type": "exec", "command": []string{"go", "test", "."}}))
		answered <- answer{r, err}
	}()
	// Killed once the command runs: the action is then past the check
	// that its worker is live.
	container := sp["container_id"].(string)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		top, _ := exec.Command("docker", "top", container, "-eo", "pid,args").CombinedOutput()
		if strings.Contains(string(top), "go test") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("go test did not start in a minute:\n%s", top)
		}
	}
	dockertest.Docker(t, "kill", container)
	var r result
	select {
	case a := <-answered:
		if a.err != nil {
			t.Fatal(a.err)
		}
		r = a.r
	case <-time.After(2 * time.Minute):
		t.Fatal("the action was not answered after its worker was killed")
	}
	e, _ := r.out["error"].(map[string]any)
	if !r.isError || e["code"] != "unavailable" || !strings.Contains(r.text, "stopped while the action ran: it was killed by signal 9 (exit code 137)") || !strings.Contains(r.text, "resume") {
		t.Errorf("the action whose worker was killed: %+v", r)
	}
	t.Logf("answer: %s", r.text)
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "slow"}); st["state"] != "orphaned" {
		t.Errorf("state %v, want orphaned", st["state"])
	}
}

// A worker killed while its journey's channel is open. Actions on a live
// channel do not ask the engine about the worker; its session ends with the
// container, so once the marketplace has seen that, the next action asks
// and answers not_live (the action did not run), orphaning the journey.
// Resume brings the workspace back, without the refused write.
func TestKilledUnderAnOpenChannel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "k"})
	must(t, cs, "execute_in_worker", execArgs("k", map[string]any{"type": "write", "target": "a.txt", "content": "before"}))
	states := b.rt.states.Load()
	for range 3 {
		must(t, cs, "execute_in_worker", execArgs("k", map[string]any{"type": "read", "target": "a.txt"}))
	}
	if n := b.rt.states.Load() - states; n != 0 {
		t.Errorf("3 actions on an open channel asked the engine for the worker's state %d times, want 0", n)
	}
	dockertest.Docker(t, "kill", sp["container_id"].(string))
	dockertest.Docker(t, "wait", sp["container_id"].(string))
	time.Sleep(200 * time.Millisecond) // the engine closes the exec stream; the session sees it end
	for _, a := range []map[string]any{
		{"type": "write", "target": "a.txt", "content": "after"},
		{"type": "read", "target": "a.txt"},
	} {
		r := call(t, cs, "execute_in_worker", execArgs("k", a))
		if e, _ := r.out["error"].(map[string]any); !r.isError || e["code"] != "not_live" || !strings.Contains(r.text, "orphaned") || !strings.Contains(r.text, "resume") {
			t.Errorf("%v on a killed worker: %+v", a["type"], r)
		}
	}
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "k"}); st["state"] != "orphaned" || st["action_count"].(float64) != 4 {
		t.Errorf("state %v, %v actions; want orphaned, 4", st["state"], st["action_count"])
	}
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "k", "mode": "resume"})
	if r := must(t, cs, "execute_in_worker", execArgs("k", map[string]any{"type": "read", "target": "a.txt"})); readContent(r) != "before" {
		t.Errorf("after resume: %v", r)
	}
}

// stop_worker keeps, archives or deletes the workspace; fresh starts over.
func TestStopModesAndFresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	write := func(j, name string) {
		must(t, cs, "execute_in_worker", execArgs(j, map[string]any{"type": "write", "target": name, "content": "data of " + name}))
	}
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "k"})
	write("k", "a.txt")
	if s := must(t, cs, "stop_worker", map[string]any{"journey_id": "k"}); s["state"] != "stopped" {
		t.Errorf("stop keep: %v", s)
	}
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "k"}); st["state"] != "stopped" {
		t.Errorf("after stop: %v", st)
	}
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "k", "mode": "resume"})
	if r := must(t, cs, "execute_in_worker", execArgs("k", map[string]any{"type": "read", "target": "a.txt"})); readContent(r) != "data of a.txt" {
		t.Errorf("kept workspace: %v", r)
	}

	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "k", "mode": "fresh"})
	if r := call(t, cs, "execute_in_worker", execArgs("k", map[string]any{"type": "read", "target": "a.txt"})); !r.isError {
		t.Errorf("fresh kept the old workspace: %+v", r)
	}
	write("k", "b.txt")
	arch := must(t, cs, "stop_worker", map[string]any{"journey_id": "k", "workspace": "archive"})
	if arch["state"] != "deleted" || arch["archive"] == "" || arch["archive_bytes"].(float64) < 512 {
		t.Fatalf("archive: %v", arch)
	}
	tarList, err := exec.Command("tar", "-tf", arch["archive"].(string)).Output()
	if err != nil || !strings.Contains(string(tarList), "b.txt") {
		t.Errorf("archive holds %q (%v), want b.txt", tarList, err)
	}
	if r := call(t, cs, "get_worker_state", map[string]any{"journey_id": "k"}); !r.isError {
		t.Errorf("a deleted journey is still visible: %+v", r)
	}
	out, _ := exec.Command("docker", "volume", "ls", "-q", "--filter", "label=meshwork.test="+b.labels["meshwork.test"]).Output()
	if strings.TrimSpace(string(out)) != "" {
		t.Errorf("volumes left after archive and delete: %s", out)
	}
	// A deleted journey's id can be used again, for a new journey.
	again := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "k"})
	if again["state"] != "active" {
		t.Errorf("re-spawning a deleted journey's id: %v", again)
	}
}

// A stop's archive is bounded by the worker's workspace quota (and room for
// headers): a workspace past it (here filled behind the worker's back, as
// an MCP worker, which keeps no quota, could) is refused with
// resource_exhausted, and nothing is removed or half written.
func TestArchiveIsBounded(t *testing.T) {
	t.Parallel()
	b := setupWith(t, &bundle{adjust: func(d *meshtype.Definition) {
		if d.ID == "filesystem_write_v1" {
			d.Isolation.Resources.Workspace = 1 << 20 // the archive's bound: 1.27 MiB
			d.Isolation.Resources.WorkspaceFiles = 16
		}
	}})
	cs := b.client(t, aliceToken)
	sp := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "big"})
	big := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dockertest.Docker(t, "cp", big, sp["container_id"].(string)+":/workspace/big.bin")
	r := call(t, cs, "stop_worker", map[string]any{"journey_id": "big", "workspace": "archive"})
	if e, _ := r.out["error"].(map[string]any); !r.isError || e["code"] != "resource_exhausted" || !strings.Contains(r.text, "nothing was removed") {
		t.Fatalf("archiving a workspace past its bound: %+v", r)
	}
	t.Logf("archive refused: %s", r.text)
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "big"}); st["state"] != "active" {
		t.Errorf("after the refused archive: state %v, want active", st["state"])
	}
	if partial, _ := filepath.Glob(filepath.Join(b.archiveDir, "*")); len(partial) != 0 {
		t.Errorf("the refused archive left %q", partial)
	}
	// The journey goes on (its next action opens a channel again), and
	// once the file is deleted, as the refusal says, the archive is taken.
	must(t, cs, "execute_in_worker", execArgs("big", map[string]any{"type": "delete", "target": "big.bin"}))
	if s := must(t, cs, "stop_worker", map[string]any{"journey_id": "big", "workspace": "archive"}); s["state"] != "deleted" || s["archive"] == "" {
		t.Errorf("archive once the file was deleted: %v", s)
	}
}

// Actions racing for a journey's last allowed action: exactly one runs.
func TestLimitsHoldUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "busy"})
	if _, err := b.pool.Exec(context.Background(), "UPDATE journeys SET action_count = 999 WHERE id = 'busy'"); err != nil {
		t.Fatal(err)
	}
	const n = 6
	results := make(chan result, n)
	for i := range n {
		go func() {
			results <- call(t, cs, "execute_in_worker", execArgs("busy", map[string]any{"type": "write", "target": fmt.Sprintf("f%d.txt", i), "content": "x"}))
		}()
	}
	executed, refused := 0, 0
	for range n {
		r := <-results
		switch {
		case r.out["executed"] == true:
			executed++
		case strings.Contains(mustJSON(t, r.out["violations"]), `"constraint_id":"max_actions"`):
			refused++
		default:
			t.Errorf("unexpected result: %s", r.text)
		}
	}
	if executed != 1 || refused != n-1 {
		t.Errorf("executed %d and refused %d of %d actions with one left under max_actions", executed, refused, n)
	}
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A kind: mcp worker is any image with an MCP server on stdio: tool actions
// reach it, and the gate checks the tool name and the arguments first.
func TestMCPWorker(t *testing.T) {
	t.Parallel()
	requireImage(t, "meshwork/mcp-echo:latest")
	b := setup(t)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "mcp_echo_v1", "journey_id": "echo"})
	r := must(t, cs, "execute_in_worker", execArgs("echo", map[string]any{"type": "tool", "tool": "echo", "arguments": map[string]any{"text": "hello"}}))
	if !strings.Contains(mustJSON(t, r["output"]), "hello") {
		t.Errorf("echo: %v", r)
	}
	execs := b.rt.execs.Load()
	for name, tc := range map[string]struct {
		action map[string]any
		id     string
	}{
		"tool not listed":   {map[string]any{"type": "tool", "tool": "shell", "arguments": map[string]any{"text": "x"}}, "tools"},
		"rule on arguments": {map[string]any{"type": "tool", "tool": "echo", "arguments": map[string]any{"text": strings.Repeat("y", 5000)}}, "echo_text_size"},
		"not a tool action": {map[string]any{"type": "read", "target": "README.md"}, "tools"},
	} {
		res := call(t, cs, "execute_in_worker", execArgs("echo", tc.action))
		if !res.isError || !strings.Contains(mustJSON(t, res.out["violations"]), `"constraint_id":"`+tc.id+`"`) {
			t.Errorf("%s: %s", name, res.text)
		}
	}
	if b.rt.execs.Load() != execs {
		t.Error("refused tool calls reached the worker")
	}
}

// Reconciliation on start removes labelled workers without a live journey and
// orphans live journeys whose worker vanished; idle workers are stopped with
// their workspace kept.
func TestReconcileAndIdleStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	ctx := context.Background()

	stray, err := b.rt.Create(ctx, workerruntime.Spec{
		Journey: uuid.NewString(), Worker: "filesystem_write_v1", Image: "meshwork/worker:latest",
		Cmd: []string{"idle"}, User: "65532:65532", Network: "none", CPUs: 0.5, MemoryBytes: 64 << 20, PIDs: 32, Labels: b.labels,
	})
	if err != nil {
		t.Fatal(err)
	}
	gone := must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "vanished"})
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "idle"})
	must(t, cs, "execute_in_worker", execArgs("idle", map[string]any{"type": "write", "target": "kept.txt", "content": "kept"}))
	dockertest.Docker(t, "rm", "-f", gone["container_id"].(string))
	// A journey of an isolation level this marketplace does not serve (as
	// after a restart without --meshworker): no runtime to ask, orphaned.
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "unserved"})
	if _, err := b.pool.Exec(ctx, "UPDATE journeys SET isolation_level = 'process', container_id = 'process-4242' WHERE id = 'unserved'"); err != nil {
		t.Fatal(err)
	}

	b.start(t) // reconciles
	cs = b.client(t, aliceToken)
	if st, err := b.rt.State(ctx, stray); err != nil || st != workerruntime.StateMissing {
		t.Errorf("stray worker: state %v, %v; want missing", st, err)
	}
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "vanished"}); st["state"] != "orphaned" {
		t.Errorf("journey whose container vanished: %v", st["state"])
	}
	// Recorded, not only reported (get_worker_state says orphaned of any
	// journey without a running worker): it no longer counts as live.
	var unserved string
	if err := b.pool.QueryRow(ctx, "SELECT state FROM journeys WHERE id = 'unserved'").Scan(&unserved); err != nil || unserved != "orphaned" {
		t.Errorf("journey of an isolation level not served, after reconcile: %q, %v; want orphaned", unserved, err)
	}
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "idle"}); st["state"] != "active" {
		t.Errorf("healthy journey after reconcile: %v", st["state"])
	}

	stopped, err := b.mgr.StopIdle(ctx, time.Now().Add(31*time.Minute)) // past the 30m default
	if err != nil || stopped != 1 {
		t.Fatalf("StopIdle: %d, %v; want 1", stopped, err)
	}
	if st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "idle"}); st["state"] != "stopped" {
		t.Errorf("idle journey: %v, want stopped", st["state"])
	}
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "idle", "mode": "resume"})
	if r := must(t, cs, "execute_in_worker", execArgs("idle", map[string]any{"type": "read", "target": "kept.txt"})); readContent(r) != "kept" {
		t.Errorf("workspace after an idle stop: %v", r)
	}
}

// git_v1 works on an empty workspace: init, write, add, commit, log; there
// is no shell anywhere.
func TestGitWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "git_v1", "journey_id": "repo"})
	tool := func(name string, args map[string]any) map[string]any {
		return must(t, cs, "execute_in_worker", execArgs("repo", map[string]any{"type": "tool", "tool": name, "arguments": args}))
	}
	tool("git_init", map[string]any{})
	must(t, cs, "execute_in_worker", execArgs("repo", map[string]any{"type": "write", "target": "main.go", "content": "package main\n"}))
	tool("git_add", map[string]any{"paths": []any{"main.go"}})
	tool("git_commit", map[string]any{"message": "first commit"})
	if log := tool("git_log", map[string]any{}); !strings.Contains(mustJSON(t, log), "first commit") {
		t.Errorf("git_log: %v", log)
	}
	if r := call(t, cs, "execute_in_worker", execArgs("repo", map[string]any{"type": "tool", "tool": "git_commit", "arguments": map[string]any{}})); !r.isError || !strings.Contains(r.text, "commit_message_required") {
		t.Errorf("commit without a message: %s", r.text)
	}
}

// The probes and the metrics beside /mcp, which need no token.
func TestProbesAndMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "m"})
	must(t, cs, "execute_in_worker", execArgs("m", map[string]any{"type": "write", "target": "a.txt", "content": "x"}))
	call(t, cs, "execute_in_worker", execArgs("m", map[string]any{"type": "read", "target": "../etc/passwd"}))
	// A worker id a client made up must not become a label value.
	if r := call(t, cs, "spawn_worker", map[string]any{"worker_id": "made_up_worker_v9", "journey_id": "m2"}); !r.isError {
		t.Fatalf("spawning an unknown worker: %+v", r)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(b.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`meshwork_action_duration_seconds_count{decision="allowed",type="write"} 1`,
		`meshwork_action_duration_seconds_count{decision="refused",type="read"} 1`,
		`meshwork_gate_refusals_total{constraint="path_safety"} 1`,
		`meshwork_spawn_duration_seconds_count{outcome="ok",worker="filesystem_write_v1"} 1`,
		`meshwork_journeys_live{worker="filesystem_write_v1"} 1`,
		`meshwork_journeys_live{worker="filesystem_research_v1"} 0`,
		`meshwork_agent_runs_total{backend="claude",outcome="ok"} 0`,
		`meshwork_agent_tokens_total{backend="other",type="input"} 0`,
	} {
		if code != 200 || !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "made_up_worker_v9") {
		t.Error("/metrics holds a worker id a client made up")
	}
	checkBoundedLabels(t, body)

	must(t, cs, "stop_worker", map[string]any{"journey_id": "m"})
	if _, body := get("/metrics"); !strings.Contains(body, `meshwork_journeys_live{worker="filesystem_write_v1"} 0`+"\n") {
		t.Error("a stopped journey is still counted live")
	}
}
