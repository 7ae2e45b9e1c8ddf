package meshctl

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient/apiclienttest"
)

const watching = "Watching run " + runID + "; Ctrl-C stops watching, not the run.\n"

func TestRunWatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		scenario func() scenario
		drops    []int
		code     int
	}{
		{"succeeded", succeeded, nil, 0},
		{"waiting", waiting, nil, 2},
		{"failed", failed, nil, 1},
		// A stream that drops twice is followed to the end, and prints
		// every line once.
		{"succeeded", succeeded, []int{3, 0}, 0},
		{"failed", failed, []int{4}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s := tt.scenario()
			b.fake.NextRun(s.view)
			b.fake.SetStream(runID, &apiclienttest.Stream{Events: s.events, Drops: tt.drops})
			r := b.exec(t, "run", "research_pipeline", "--input", "task=dinosaurs", "--input", "depth=2", "--watch")
			r.check(t, tt.code)
			golden(t, "run_watch_"+tt.name, r.stdout)
			if r.stderr != watching {
				t.Errorf("stderr = %q", r.stderr)
			}
			if got := len(b.fake.StreamAfters(runID)); got != len(tt.drops)+1 {
				t.Errorf("%d connections, want %d", got, len(tt.drops)+1)
			}
		})
	}
}

func TestRunWatchJSON(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		scenario func() scenario
		code     int
	}{"succeeded": {succeeded, 0}, "waiting": {waiting, 2}, "failed": {failed, 1}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s := tt.scenario()
			b.fake.NextRun(s.view)
			b.fake.SetStream(runID, &apiclienttest.Stream{Events: s.events})
			r := b.exec(t, "-o", "json", "run", "research_pipeline", "--input", "task=x", "--watch")
			r.check(t, tt.code)
			lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			var got []api.Event
			for _, l := range lines {
				var ev api.Event
				if err := json.Unmarshal([]byte(l), &ev); err != nil {
					t.Fatalf("line %q: %v", l, err)
				}
				got = append(got, ev)
			}
			if !reflect.DeepEqual(got, s.events) {
				t.Errorf("events:\n got %+v\nwant %+v", got, s.events)
			}
			if r.stderr != "" {
				t.Errorf("stderr = %q", r.stderr)
			}
		})
	}
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("PrintsID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.NextRun(baseView("running"))
		r := b.exec(t, "run", "research_pipeline", "-i", "task=a=b", "--thread", "team-a")
		r.check(t, 0)
		if r.stdout != runID+"\n" || r.stderr != "" {
			t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
		}
		b.fake.CheckBody(t, "POST", "/v1/runs", `{"pipeline":"research_pipeline","inputs":{"task":"a=b"},"thread":"team-a"}`)
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.NextRun(baseView("running"))
		r := b.exec(t, "run", "research_pipeline", "--output", "json")
		r.check(t, 0)
		var run api.Run
		if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || run.ID != runID || run.Status != "running" {
			t.Errorf("stdout %q: %+v, %v", r.stdout, run, err)
		}
	})

	t.Run("Inputs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.NextRun(baseView("running"))
		file := filepath.Join(t.TempDir(), "inputs.json")
		if err := os.WriteFile(file, []byte(`{"task": "from the file", "depth": 5, "extra": true}`), 0o600); err != nil {
			t.Fatal(err)
		}
		r := b.exec(t, "run", "research_pipeline", "--inputs-file", file, "--input", "task=from a flag", "--input", "depth=x", "--input-json", `tags=["a", 1]`)
		r.check(t, 0)
		// depth=x is not a number: it goes as a string, for the server
		// to refuse.
		b.fake.CheckBody(t, "POST", "/v1/runs", `{"pipeline":"research_pipeline","inputs":{"depth":"x","extra":true,"tags":["a",1],"task":"from a flag"}}`)
	})

	t.Run("InputsFromStdin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.NextRun(baseView("running"))
		b.stdin = `{"task": "piped"}`
		b.exec(t, "run", "research_pipeline", "--inputs-file", "-").check(t, 0)
		b.fake.CheckBody(t, "POST", "/v1/runs", `{"pipeline":"research_pipeline","inputs":{"task":"piped"}}`)
	})

	for name, tt := range map[string]struct {
		args   []string
		stderr string
	}{
		"twice":     {[]string{"-i", "task=a", "--input-json", `task="b"`}, `meshctl: input "task" is given twice (--input and --input-json)` + "\n"},
		"no equals": {[]string{"-i", "task"}, `meshctl: --input "task": want key=value` + "\n"},
		"bad JSON":  {[]string{"--input-json", "tags=[a]"}, "meshctl: --input-json tags: [a] is not JSON: invalid character 'a' looking for beginning of value\n"},
		"no file":   {[]string{"--inputs-file", "/nonexistent/x.json"}, "meshctl: --inputs-file: open /nonexistent/x.json: no such file or directory\n"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			r := b.exec(t, append([]string{"run", "research_pipeline"}, tt.args...)...)
			r.check(t, 1)
			if r.stderr != tt.stderr || r.stdout != "" {
				t.Errorf("stderr %q, want %q; stdout %q", r.stderr, tt.stderr, r.stdout)
			}
			if _, ok := b.fake.LastRequest("POST", "/v1/runs"); ok {
				t.Error("the run was started")
			}
		})
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    map[string]string
		args   []string
		stderr string
	}{
		{
			"unknown pipeline", nil,
			[]string{"run", "nope"},
			"meshctl: pipeline \"nope\": not found (known: research_pipeline)\n",
		},
		{
			"unknown command", nil,
			[]string{"runs", "get", runID},
			"meshctl: unknown command \"get\" for \"meshctl runs\"\n",
		},
		{
			"unknown run", nil,
			[]string{"runs", "show", "nope"},
			"meshctl: run \"nope\": not found\n",
		},
		{
			"conflict", nil,
			[]string{"runs", "resume", runID},
			"meshctl: conflict: run " + runID + " is waiting; only a failed run can be resumed (an approval is resumed by its interrupt id)\n",
		},
		{
			"wrong token",
			map[string]string{"MESHCTL_TOKEN": "wrong"},
			[]string{"runs", "list"},
			"meshctl: missing or wrong bearer token\n",
		},
		{
			"no token",
			map[string]string{"MESHCTL_TOKEN": ""},
			[]string{"runs", "list"},
			"meshctl: missing or wrong bearer token\nmeshctl: no token was given: set MESHCTL_TOKEN\n",
		},
		{
			"token flag",
			map[string]string{"MESHCTL_TOKEN": ""},
			[]string{"runs", "show", "nope", "--token", token},
			"meshctl: run \"nope\": not found\n",
		},
		{
			"server flag over env", nil,
			[]string{"pipelines", "list", "--server", "ftp://x"},
			"meshctl: server \"ftp://x\" (--server or MESHCTL_SERVER) is not a URL such as http://127.0.0.1:8090\n",
		},
		{
			"output", nil,
			[]string{"runs", "list", "-o", "yaml"},
			"meshctl: --output \"yaml\": want text or json\n",
		},
		{
			"negative limit", nil,
			[]string{"runs", "list", "--limit", "-1"},
			"meshctl: --limit -1: want 1 to 1000 (0 or none: 50)\n",
		},
		{
			"missing arg", nil,
			[]string{"runs", "cancel"},
			"meshctl: missing RUN_ID (usage: meshctl runs cancel RUN_ID [flags])\n",
		},
		{
			"no value", nil,
			[]string{"runs", "approve", iid},
			"meshctl: give the decision with --value (such as --value approved) or --value-json\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fake.AddRun(waiting().view)
			for k, v := range tt.env {
				b.env[k] = v
			}
			r := b.exec(t, tt.args...)
			r.check(t, 1)
			if r.stderr != tt.stderr || r.stdout != "" {
				t.Errorf("stderr:\n got %q\nwant %q\nstdout %q", r.stderr, tt.stderr, r.stdout)
			}
		})
	}
}

func TestApprove(t *testing.T) {
	t.Parallel()
	const approved = `{"value":"approved"}`

	t.Run("RunID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		v := waiting().view
		// An older interrupt of the run, resumed, does not count.
		v.Interrupts = append([]api.Interrupt{{ID: iid2, RunID: runID, NodeID: "approve", Status: "resumed", Value: json.RawMessage(`"no"`)}}, v.Interrupts...)
		b.fake.AddRun(v)
		r := b.exec(t, "runs", "approve", runID, "--value", "approved")
		r.check(t, 0)
		if want := "Interrupt " + iid + " resumed with approved: run " + runID + " is running.\n"; r.stdout != want {
			t.Errorf("stdout %q, want %q", r.stdout, want)
		}
		b.fake.CheckBody(t, "POST", "/v1/interrupts/"+iid+"/resume", approved)
	})

	t.Run("InterruptID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.AddRun(waiting().view)
		r := b.exec(t, "runs", "approve", iid, "--value-json", `{"decision": "rejected"}`, "--migrate", "-o", "json")
		r.check(t, 0)
		b.fake.CheckBody(t, "POST", "/v1/interrupts/"+iid+"/resume", `{"value":{"decision":"rejected"},"migrate":true}`)
		var run api.Run
		if err := json.Unmarshal([]byte(r.stdout), &run); err != nil || run.ID != runID {
			t.Errorf("stdout %q: %v", r.stdout, err)
		}
	})

	t.Run("Several", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		v := waiting().view
		v.Interrupts = append(v.Interrupts, api.Interrupt{ID: iid2, RunID: runID, NodeID: "legal", Iteration: 1, Status: "pending"})
		b.fake.AddRun(v)
		r := b.exec(t, "runs", "approve", runID, "--value", "approved")
		r.check(t, 1)
		golden(t, "approve_several", r.stderr)
		if _, ok := b.fake.LastRequest("POST", "/v1/interrupts/"+iid+"/resume"); ok {
			t.Error("an interrupt was resumed")
		}
	})

	t.Run("None", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fake.AddRun(succeeded().view)
		r := b.exec(t, "runs", "approve", runID, "--value", "approved")
		r.check(t, 1)
		if want := "meshctl: run " + runID + " has no pending interrupt (it is succeeded)\n"; r.stderr != want {
			t.Errorf("stderr %q, want %q", r.stderr, want)
		}
	})

	t.Run("Watch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		v := waiting().view
		v.HeadSeq = 3 // after the approval
		// An attempt from before, which the stream sends again.
		v.Attempts = []api.Attempt{*attempt(9, "research", 1, "failed", "old news").Attempt}
		b.fake.AddRun(v)
		b.fake.SetStream(runID, &apiclienttest.Stream{Events: []api.Event{
			attempt(9, "research", 1, "failed", "old news"),
			checkpoint(0, nil),
			checkpoint(1, map[string]api.NodeState{"research": done(1, 1, "facts")}),
			checkpoint(2, map[string]api.NodeState{"approve": {Status: "waiting"}}),
			checkpoint(3, map[string]api.NodeState{"approve": done(1, 1, "approved")}),
			runEvent("succeeded", ""),
		}})
		r := b.exec(t, "runs", "approve", runID, "--value", "approved", "--watch")
		r.check(t, 0)
		golden(t, "approve_watch", r.stdout)
		if afters := b.fake.StreamAfters(runID); !reflect.DeepEqual(afters, []string{"2"}) {
			t.Errorf("afters = %q, want the stream from the approval on", afters)
		}
	})
}

func TestRunsCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := waiting().view
	f := failed().view
	f.ID, f.CreatedAt, f.Thread, f.TraceID = forkID, t0.Add(-3600e9), "team-a", ""
	b.fake.AddRun(w)
	b.fake.AddRun(f)
	zero, parent := 0, 1
	b.fake.SetCheckpoints(runID, []api.Checkpoint{
		{RunID: runID, Seq: 0, Delta: stateWithInputs(), Bytes: 120, CreatedAt: t0},
		{
			RunID: runID, Seq: 1, ParentRun: runID, ParentSeq: &zero, NodeID: "research", Iteration: 1, Bytes: 250, CreatedAt: t0.Add(61e9),
			Delta: deltaOf(map[string]api.NodeState{"research": done(1, 1, "facts")}, map[string]string{"researcher": "sess-r1"}),
		},
		{
			RunID: runID, Seq: 2, ParentRun: runID, ParentSeq: &parent, NodeID: "research", Iteration: 1, Bytes: 90, CreatedAt: t0.Add(62e9),
			Delta: deltaOf(map[string]api.NodeState{"approve": {Status: "waiting"}, "write": {Status: "skipped"}}, nil),
		},
	})

	for _, tt := range []struct {
		name string
		args []string
	}{
		{"runs_list", []string{"runs", "list"}},
		{"runs_show_waiting", []string{"runs", "show", runID}},
		{"runs_show_failed", []string{"runs", "show", forkID}},
		{"runs_history", []string{"runs", "history", runID}},
		{"pipelines_list", []string{"pipelines", "list"}},
	} {
		r := b.exec(t, tt.args...)
		r.check(t, 0)
		golden(t, tt.name, r.stdout)
	}

	r := b.exec(t, "runs", "list", "--status", "failed", "--limit", "1", "-o", "json")
	r.check(t, 0)
	var list struct {
		Runs []api.Run `json:"runs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Runs) != 1 || list.Runs[0].ID != forkID {
		t.Errorf("runs list -o json: %q, %v", r.stdout, err)
	}
	if r.stderr != "" {
		t.Errorf("stderr %q, want nothing with JSON", r.stderr)
	}
	if req, _ := b.fake.LastRequest("GET", "/v1/runs"); req.Query != "limit=1&status=failed" {
		t.Errorf("query %q", req.Query)
	}

	r = b.exec(t, "runs", "show", runID, "-o", "json")
	r.check(t, 0)
	var v api.RunView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || !reflect.DeepEqual(v, w) {
		t.Errorf("runs show -o json: %+v, %v", v, err)
	}

	r = b.exec(t, "runs", "history", runID, "-o", "json")
	r.check(t, 0)
	var h struct {
		Checkpoints []api.Checkpoint `json:"checkpoints"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || len(h.Checkpoints) != 3 {
		t.Errorf("runs history -o json: %q, %v", r.stdout, err)
	}

	// The commands that change a run say what they did, in turn.
	for _, tt := range []struct {
		args   []string
		stdout string
	}{
		{[]string{"runs", "resume", forkID, "--migrate"}, "Run " + forkID + " resumed: it is running.\n"},
		{[]string{"runs", "cancel", runID}, "Run " + runID + " cancelled.\n"},
		{[]string{"runs", "prune", runID, "--keep", "1", "-o", "json"}, "{\n  \"deleted\": 2\n}\n"},
		{[]string{"runs", "prune", runID, "--keep", "1"}, "Deleted 0 checkpoints of run " + runID + ".\n"},
	} {
		r := b.exec(t, tt.args...)
		r.check(t, 0)
		if r.stdout != tt.stdout {
			t.Errorf("%s: %q, want %q", strings.Join(tt.args, " "), r.stdout, tt.stdout)
		}
	}
	b.fake.CheckBody(t, "POST", "/v1/runs/"+forkID+"/resume", `{"migrate":true}`)
}

func TestListMore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.AddRun(waiting().view)
	r := b.exec(t, "runs", "list", "--limit", "1")
	r.check(t, 0)
	if want := "More runs may follow: add --before " + runID + "\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

func TestFork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.AddRun(failed().view)
	fork := baseView("running")
	fork.ID = forkID
	b.fake.NextRun(fork)
	patch := filepath.Join(t.TempDir(), "patch.json")
	if err := os.WriteFile(patch, []byte(`{"inputs": {"task": "again"}, "nodes": {"review": {"status": "pending"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.exec(t, "runs", "fork", runID, "--seq", "1", "--patch-file", patch, "--thread", "team-b")
	r.check(t, 0)
	if r.stdout != forkID+"\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	b.fake.CheckBody(t, "POST", "/v1/runs/"+runID+"/fork",
		`{"seq":1,"patch":{"inputs":{"task":"again"},"nodes":{"review":{"output":"","status":"pending","attempts":0,"iteration":0}}},"thread":"team-b"}`)

	if err := os.WriteFile(patch, []byte(`{"node": {}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r = b.exec(t, "runs", "fork", runID, "--seq", "1", "--patch-file", patch)
	r.check(t, 1)
	if want := "meshctl: --patch-file: " + patch + ": json: unknown field \"node\"\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

func TestForkWatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.AddRun(failed().view)
	s := succeeded()
	s.view.ID = forkID
	b.fake.NextRun(s.view)
	for i := range s.events {
		s.events[i].RunID = forkID
	}
	b.fake.SetStream(forkID, &apiclienttest.Stream{Events: s.events})
	r := b.exec(t, "runs", "fork", runID, "--seq", "1", "-w")
	r.check(t, 0)
	golden(t, "fork_watch", r.stdout)
}

// TestWatchInterrupted checks that Ctrl-C (the context's end) stops
// watching with exit status 130, and says the run goes on.
func TestWatchInterrupted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := waiting()
	s.view.Status = "running"
	b.fake.AddRun(s.view)
	b.fake.SetStream(runID, &apiclienttest.Stream{Events: s.events[:2], Hold: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := &signalWriter{want: "research", seen: make(chan struct{})}
	var errOut bytes.Buffer
	codec := make(chan int, 1)
	go func() { codec <- b.execTo(ctx, out, &errOut, "runs", "watch", runID) }()
	<-out.seen
	cancel()
	if code := <-codec; code != 130 {
		t.Fatalf("exit %d, want 130; stderr %q", code, errOut.String())
	}
	want := watching + "meshctl: stopped watching; run " + runID + " goes on (meshctl runs watch " + runID + " follows it again, meshctl runs cancel " + runID + " stops it)\n"
	if errOut.String() != want {
		t.Errorf("stderr:\n got %q\nwant %q", errOut.String(), want)
	}
}

// Ctrl-C before the run is first read exits 130 as well.
func TestWatchInterruptedAtFirstRead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := waiting()
	s.view.Status = "running"
	b.fake.AddRun(s.view)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out, errOut bytes.Buffer
	if code := b.execTo(ctx, &out, &errOut, "runs", "watch", runID); code != 130 {
		t.Fatalf("exit %d, want 130; stderr %q", code, errOut.String())
	}
	want := "meshctl: stopped watching; run " + runID + " goes on (meshctl runs watch " + runID + " follows it again, meshctl runs cancel " + runID + " stops it)\n"
	if errOut.String() != want || out.Len() != 0 {
		t.Errorf("stdout %q, stderr:\n got %q\nwant %q", out.String(), errOut.String(), want)
	}
}

// signalWriter closes seen once what was written contains want.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func stateWithInputs() (s api.State) {
	s.Inputs = map[string]any{"task": "dinosaurs"}
	return s
}

func deltaOf(nodes map[string]api.NodeState, sessions map[string]string) (s api.State) {
	s.Nodes, s.Sessions = nodes, sessions
	return s
}

// The fake answers errors of its own; make sure they render as is too.
func TestFakeFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake.Fail("GET", "/v1/pipelines", apiclient.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the catalog is reloading"})
	r := b.exec(t, "pipelines", "list")
	r.check(t, 1)
	if r.stderr != "meshctl: the catalog is reloading\n" {
		t.Errorf("stderr %q", r.stderr)
	}
}

// runs patch prints the run's patch for git apply; a patch node that
// changed nothing is said on stderr, and a run without a patch is an error
// that says why.
func TestRunsPatch(t *testing.T) {
	t.Parallel()
	const diff = "diff --git a/add.go b/add.go\n--- a/add.go\n+++ b/add.go\n@@ -1 +1 @@\n-a\n+b\n"
	tests := []struct {
		name                  string
		patchNode, patch      string
		omits                 []string
		args                  []string
		code                  int
		wantStdout, wantError string
	}{
		{"the patch node's", "write", diff, nil, nil, 0, diff, ""},
		{"no change", "write", "", nil, nil, 0, "", "run " + runID + ": write changed nothing; its patch is empty\n"},
		{"a node not done", "write", diff, nil, []string{"--node", "revise"}, 1, "", "meshctl: run " + runID + ": node revise has no patch yet (it is skipped)\n"},
		{"a pipeline without a source", "", "", nil, nil, 1, "", "meshctl: run " + runID + ": pipeline research_pipeline makes no patch (no node has a source)\n"},
		// Files the patch cannot carry are said, one a line, a name that
		// would break the list quoted.
		{"files left out", "write", diff, []string{"logo.png", "bad\nname"}, nil, 0, diff, "run " + runID + ": the patch of write leaves out 2 changed file(s) too large for a patch (over 4 MiB); applying it does not make them (meshctl runs export " + runID + " --node write -o FILE saves them):\n  logo.png\n  \"bad\\nname\"\n"},
		{"only files left out", "write", "", []string{"logo.png"}, nil, 0, "", "run " + runID + ": the patch of write leaves out 1 changed file(s) too large for a patch (over 4 MiB); applying it does not make them (meshctl runs export " + runID + " --node write -o FILE saves them):\n  logo.png\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			v := succeeded().view
			v.PatchNode = tt.patchNode
			for i := range v.Nodes {
				if v.Nodes[i].ID == tt.patchNode {
					v.Nodes[i].Patch, v.Nodes[i].PatchOmits = tt.patch, tt.omits
				}
			}
			b.fake.AddRun(v)
			r := b.exec(t, append([]string{"runs", "patch", runID}, tt.args...)...)
			r.check(t, tt.code)
			if r.stdout != tt.wantStdout || r.stderr != tt.wantError {
				t.Errorf("stdout %q, stderr %q; want %q, %q", r.stdout, r.stderr, tt.wantStdout, tt.wantError)
			}
		})
	}
}

// runs export saves a node's workspace whole, or nothing: a file whose
// bytes do not match the server's digest is not left behind, and neither
// is the temporary file, nor is an older file of that name replaced.
func TestRunsExport(t *testing.T) {
	t.Parallel()
	content := []byte("# v2 git bundle\n\x00binary\xff")
	tests := []struct {
		name      string
		ws        apiclienttest.Workspace
		args      []string
		code      int
		wantFile  []byte // nil: the old file stays
		wantError string
	}{
		{
			"the patch node's bundle",
			apiclienttest.Workspace{Content: content, Journey: "implementer-1", Commit: "c0ffee"},
			nil, 0, content,
			"run " + runID + ": wrote a git bundle of commit c0ffee, the change of node write (" + strconv.Itoa(len(content)) + " bytes, SHA-256 " + sha256hex(content) + ") to OUT\ntake it in a clone of the source with: git pull OUT meshwork\n",
		},
		{
			"a tar of another node",
			apiclienttest.Workspace{Content: content, Journey: "implementer-1"},
			[]string{"--node", "revise", "--format", "tar"},
			0, content,
			"run " + runID + ": wrote a tar of the workspace of node revise (" + strconv.Itoa(len(content)) + " bytes, SHA-256 " + sha256hex(content) + ") to OUT\n",
		},
		{
			"a digest that does not match",
			apiclienttest.Workspace{Content: content, Digest: api.ReprDigest([]byte("other"))},
			nil, 1, nil,
			"meshctl: GET /v1/runs/" + runID + "/nodes/write/workspace: the " + strconv.Itoa(len(content)) + " bytes read do not have the SHA-256 the server sent (cut short?)\n",
		},
		{
			"no digest",
			apiclienttest.Workspace{Content: content, Digest: "md5=:x:"},
			nil, 1, nil,
			"meshctl: GET /v1/runs/" + runID + "/nodes/write/workspace: no SHA-256 Repr-Digest in the answer (\"md5=:x:\")\n",
		},
		{"a format it does not know", apiclienttest.Workspace{Content: content}, []string{"--format", "zip"}, 1, nil, "meshctl: --format \"zip\" is not one of bundle, tar\n"},
		{"the server's refusal", apiclienttest.Workspace{Content: content}, []string{"--node", "nope"}, 1, nil, "meshctl: apiclienttest: no workspace set for node nope\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			v := succeeded().view
			v.PatchNode = "write"
			b.fake.AddRun(v)
			node := "write"
			if i := slices.Index(tt.args, "--node"); i >= 0 {
				node = tt.args[i+1]
			}
			if node != "nope" {
				b.fake.SetWorkspace(runID, node, tt.ws)
			}
			dir := t.TempDir()
			out := filepath.Join(dir, "change.bundle")
			if err := os.WriteFile(out, []byte("older"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := b.exec(t, append([]string{"runs", "export", runID, "-o", out}, tt.args...)...)
			r.check(t, tt.code)
			if want := strings.ReplaceAll(tt.wantError, "OUT", out); r.stderr != want || r.stdout != "" {
				t.Errorf("stdout %q, stderr:\n%s\nwant:\n%s", r.stdout, r.stderr, want)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.wantFile
			if want == nil {
				want = []byte("older")
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the file holds %q, want %q", got, want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("the directory holds %d files, want the one: %v", len(entries), entries)
			}
			if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("the file's mode: %v, %v; want the 0600 of the one it replaced", fi.Mode(), err)
			}
			if r, ok := b.fake.LastRequest(http.MethodGet, "/v1/runs/"+runID+"/nodes/"+node+"/workspace"); tt.code == 0 && (!ok || r.Query != "format="+map[bool]string{true: "tar", false: "bundle"}[slices.Contains(tt.args, "tar")]) {
				t.Errorf("the request: %+v", r)
			}
		})
	}
	// A symbolic link to a file is followed: the file replaced whole, the
	// link kept; a failed export leaves the file as it was.
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target.bundle"), filepath.Join(dir, "link.bundle")
	if err := os.WriteFile(target, []byte("older"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	bl := setup(t)
	v := succeeded().view
	v.PatchNode = "write"
	bl.fake.AddRun(v)
	bl.fake.SetWorkspace(runID, "write", apiclienttest.Workspace{Content: content, Digest: api.ReprDigest([]byte("other"))})
	bl.exec(t, "runs", "export", runID, "-o", link).check(t, 1)
	if got, _ := os.ReadFile(target); string(got) != "older" {
		t.Errorf("the link's file after a failed export: %q", got)
	}
	bl.fake.SetWorkspace(runID, "write", apiclienttest.Workspace{Content: content, Commit: "c0ffee"})
	bl.exec(t, "runs", "export", runID, "-o", link).check(t, 0)
	if got, _ := os.ReadFile(target); !bytes.Equal(got, content) {
		t.Errorf("the link's file after the export: %q", got)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link after the export: %v, %v", fi.Mode(), err)
	}
	// The hint names the file so that a shell in another directory reads
	// it as it is: absolute, quoted.
	odd := filepath.Join(t.TempDir(), "it's a bundle")
	if r := bl.exec(t, "runs", "export", runID, "-o", odd); r.code != 0 || !strings.HasSuffix(r.stderr, "git pull '"+strings.ReplaceAll(odd, "'", `'\''`)+"' meshwork\n") {
		t.Errorf("the hint for %q: exit %d, %q", odd, r.code, r.stderr)
	}
	// A device is written through, not replaced.
	b0 := setup(t)
	b0.fake.AddRun(v)
	b0.fake.SetWorkspace(runID, "write", apiclienttest.Workspace{Content: content, Commit: "c0ffee"})
	b0.exec(t, "runs", "export", runID, "-o", os.DevNull).check(t, 0)
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Errorf("%s after the export: %v, %v", os.DevNull, fi.Mode(), err)
	}
	// No -o, and -o naming a directory, are refused before any request.
	b := setup(t)
	for _, args := range [][]string{{"runs", "export", runID}, {"runs", "export", runID, "-o", t.TempDir()}} {
		r := b.exec(t, args...)
		r.check(t, 1)
		if !strings.Contains(r.stderr, "-o ") {
			t.Errorf("meshctl %v: %q", args, r.stderr)
		}
	}
	if n := len(b.fake.Requests()); n != 0 {
		t.Errorf("%d requests before the arguments were checked", n)
	}
}

func sha256hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// What the orchestrator sends reaches the terminal without its escape
// sequences: an agent's output, a node's error, an error message cannot
// rewrite the screen or set the clipboard. A patch is written byte for
// byte, and JSON output as its encoder escapes it.
func TestServerTextIsSafeForATerminal(t *testing.T) {
	t.Parallel()
	const hostile = "\x1b]52;c;ZXZpbA==\a\x1b[2K\rOK \u202egnp.exe\u202c \xc2\x9b31m"
	b := setup(t)
	v := succeeded().view
	v.Outputs = map[string]string{v.Nodes[0].ID: "fine\n" + hostile}
	v.Error = hostile
	v.PatchNode, v.Nodes[0].Patch = v.Nodes[0].ID, "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-\x1b[0m\n+ok\n"
	b.fake.AddRun(v)
	b.fake.Fail(http.MethodPost, "/v1/runs/"+runID+"/cancel", apiclient.Error{Status: http.StatusConflict, Code: "conflict", Message: "no: " + hostile})
	for _, args := range [][]string{{"runs", "show", runID}, {"runs", "cancel", runID}} {
		r := b.exec(t, args...)
		for name, got := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if strings.ContainsAny(got, "\x1b\a\r\u202e\u009b") {
				t.Errorf("meshctl %v: %s holds control characters: %q", args, name, got)
			}
		}
		if args[1] == "show" && !strings.Contains(r.stdout, "fine") {
			t.Errorf("meshctl runs show: the output is gone:\n%s", r.stdout)
		}
	}
	if r := b.exec(t, "runs", "patch", runID); r.stdout != v.Nodes[0].Patch {
		t.Errorf("runs patch: %q, want the patch byte for byte", r.stdout)
	}
	r := b.exec(t, "runs", "show", runID, "--output", "json")
	if !strings.Contains(r.stdout, `\u001b]52`) || !strings.Contains(r.stdout, `\u202e`) || !strings.Contains(r.stdout, `\u009b`) || strings.ContainsAny(r.stdout, "\u202e\u009b") {
		t.Errorf("runs show --output json does not escape what a terminal acts on:\n%s", r.stdout)
	}
	var got api.RunView
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Error != hostile {
		t.Errorf("runs show --output json: the error reads back as %q (%v), want it as sent", got.Error, err)
	}
	// An agent's Windows line endings read as line endings.
	var out strings.Builder
	if _, err := (terminalSafe{&out}).Write([]byte("one\r\ntwo\r")); err != nil || out.String() != "one\ntwo\ufffd" {
		t.Errorf("terminalSafe wrote %q (%v)", out.String(), err)
	}
}
