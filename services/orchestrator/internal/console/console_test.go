package console_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/console"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/httpapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
	"github.com/meshwork/meshwork/services/orchestrator/pipelines"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	aliceToken = "alice-token-0123456789"
	bobToken   = "bob-token-0123456789ab"
)

type site struct {
	t    testing.TB
	url  string
	eng  *engine.Engine
	exec *enginetest.InstantExecutor
	pool *pgxpool.Pool
}

// start serves the API with the console, as orchestrator serve does, over
// an engine on a fresh database.
func start(t testing.TB) *site {
	t.Helper()
	return startWith(t, enginetest.Pipelines)
}

// startWith is start with another catalog of pipelines.
func startWith(t testing.TB, pipelines fs.FS) *site {
	t.Helper()
	return serve(t, enginetest.StartWith(t, pipelines), nil)
}

// startWithExecutor is startWith with an executor of the test's.
func startWithExecutor(t testing.TB, pipelines fs.FS, x *enginetest.InstantExecutor) *site {
	t.Helper()
	return serve(t, enginetest.StartWithExecutor(t, pipelines, x), nil)
}

// withChange is the test pipelines and "change", whose one node changes a
// repository: its patch is the run's.
func withChange() fstest.MapFS {
	p := maps.Clone(enginetest.Pipelines)
	p["change.yaml"] = &fstest.MapFile{Data: []byte(`name: change
description: One change to a repository, and a second look.
inputs:
  repository: {type: repository, required: true, description: The code.}
roles:
  coder: {via: marketplace, worker: filesystem_write_v1, source: {input: repository}}
nodes:
  - {id: implement, role: coder, task: change it}
  - {id: polish, role: coder, needs: [implement], task: polish it}
patch: implement
`)}
	return p
}

// withShipped is the test pipelines and the orchestrator's shipped ones
// (research_pipeline, coding_pipeline, their prompts).
func withShipped(t testing.TB) fstest.MapFS {
	t.Helper()
	p := maps.Clone(enginetest.Pipelines)
	err := fs.WalkDir(pipelines.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(pipelines.FS(), path)
		p[path] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// patchOf is the change the test executor's nodes make: implement's and
// polish's.
func patchOf(req executor.Request) string {
	switch req.NodeID {
	case "implement":
		return "diff --git a/calc/add.go b/calc/add.go\n--- a/calc/add.go\n+++ b/calc/add.go\n@@ -1,3 +1,4 @@\n package calc\n-func Add(a, b int) int { return a - b }\n+// Add adds <script>alert(4)</script>.\n+func Add(a, b int) int { return a + b }\n \n"
	case "polish":
		return "diff --git a/README.md b/README.md\nnew file mode 100644\n--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+polished\n"
	}
	return ""
}

// A run's page shows the run's patch, and any node's on request, each with
// its download.
func TestNodePatches(t *testing.T) {
	t.Parallel()
	omits := func(req executor.Request) []string {
		if req.NodeID == "polish" {
			return []string{"logo.png"}
		}
		return nil
	}
	s := startWithExecutor(t, withChange(), &enginetest.InstantExecutor{Record: true, Patch: patchOf, Omits: omits})
	run := s.runAs("alice", "change", map[string]any{"repository": map[string]any{"git": map[string]any{"url": "/sources/calc", "ref": "main"}}})
	alice := s.browser()
	alice.signIn(aliceToken)
	_, page := alice.get("/runs/" + run.ID)
	if !strings.Contains(page, "Patch of implement") || !strings.Contains(page, "calc/add.go") || !strings.Contains(page, `href="/runs/`+run.ID+`?patch=polish#patch"`) {
		t.Fatalf("the run's page:\n%s", page)
	}
	if strings.Contains(page, "leaves out") {
		t.Errorf("implement's patch leaves nothing out, the page says it does:\n%s", page)
	}
	// The files a patch leaves out are listed with it.
	_, polish := alice.get("/runs/" + run.ID + "?patch=polish")
	if !strings.Contains(polish, "Patch of polish") || !strings.Contains(polish, "README.md") || strings.Contains(polish, "calc/add.go</code>") ||
		!strings.Contains(polish, "The patch leaves out 1 changed file(s)") || !strings.Contains(polish, "<li><code>logo.png</code></li>") {
		t.Errorf("polish's patch:\n%s", polish)
	}
	resp, body := alice.get("/runs/" + run.ID + "/patch?node=polish")
	if resp.StatusCode != http.StatusOK || body != patchOf(executor.Request{NodeID: "polish"}) || !strings.Contains(resp.Header.Get("Content-Disposition"), "-polish.patch") {
		t.Errorf("polish's download: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Disposition"), body)
	}
	for _, path := range []string{"/runs/" + run.ID + "?patch=ghost", "/runs/" + run.ID + "/patch?node=ghost"} {
		if resp, _ := alice.get(path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, resp.StatusCode)
		}
	}
	// The whole workspace is offered beside the patch (the export itself
	// is tested on real parts in the engine's TestCodingPipeline): polish's
	// is there, implement's journey has moved on since (polish worked in
	// it).
	if !strings.Contains(polish, `href="/runs/`+run.ID+`/workspace?node=polish"`) || !strings.Contains(polish, `href="/runs/`+run.ID+`/workspace?node=polish&amp;format=tar"`) {
		t.Errorf("polish's patch offers no workspace:\n%s", polish)
	}
	for path, want := range map[string]int{
		"/runs/" + run.ID + "/workspace?node=implement":         http.StatusConflict,
		"/runs/" + run.ID + "/workspace?node=ghost":             http.StatusBadRequest,
		"/runs/" + run.ID + "/workspace?node=polish&format=zip": http.StatusBadRequest,
	} {
		if resp, body := alice.get(path); resp.StatusCode != want {
			t.Errorf("%s: %d, want %d\n%s", path, resp.StatusCode, want, body)
		}
	}
	resp, body = alice.get("/runs/" + run.ID + "/workspace?node=polish&format=tar")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "tar of journey-") || resp.Header.Get("Content-Disposition") != `attachment; filename="run-`+run.ID+`-polish.tar"` {
		t.Errorf("polish's workspace: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Disposition"), body)
	}
	bob := s.browser()
	bob.signIn(bobToken)
	if resp, _ := bob.get("/runs/" + run.ID + "/workspace?node=polish"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob's download of alice's workspace: %d, want 404", resp.StatusCode)
	}
}

// serve serves the API with the console over an engine, with the journeys
// of a marketplace (nil: none).
func serve(t testing.TB, eb *enginetest.Bundle, journeys console.Journeys) *site {
	t.Helper()
	tokens, err := bearer.New(map[string]string{"alice": aliceToken, "bob": bobToken})
	if err != nil {
		t.Fatal(err)
	}
	web, err := console.New(console.Config{Engine: eb.Engine, Tokens: tokens, TraceURL: "http://grafana.local/explore?trace={trace_id}", Journeys: journeys})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Engine: eb.Engine, Tokens: tokens, Console: web, SessionCaller: console.SessionCaller(tokens, nil)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &site{t: t, url: srv.URL, eng: eb.Engine, exec: eb.Executor, pool: eb.Pool}
}

// browser is a cookie-keeping client that does not follow redirects.
type browser struct {
	s *site
	c *http.Client
}

func (s *site) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{s: s, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// reply is what a request got, its body read and closed.
type reply struct {
	StatusCode int
	Header     http.Header
}

func (b *browser) get(path string) (reply, string) {
	b.s.t.Helper()
	resp, err := b.c.Get(b.s.url + path)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header}, string(body)
}

func (b *browser) post(path string, form url.Values) (reply, string) {
	b.s.t.Helper()
	resp, err := b.c.PostForm(b.s.url+path, form)
	if err != nil {
		b.s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header}, string(body)
}

func (b *browser) signIn(token string) {
	b.s.t.Helper()
	resp, body := b.post("/signin", url.Values{"token": {token}, "next": {"/runs"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runs" {
		b.s.t.Fatalf("sign in: %d %s", resp.StatusCode, body)
	}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", page)
	}
	return m[1]
}

// runAs starts a run of pipeline with inputs as caller and returns it once
// it stops moving.
func (s *site) runAs(caller, pipeline string, inputs map[string]any) api.RunView {
	s.t.Helper()
	ctx := engine.WithViewer(context.Background(), engine.Viewer{Caller: caller})
	run, err := s.eng.StartRun(ctx, engine.StartRequest{Pipeline: pipeline, Inputs: inputs, Caller: caller})
	if err != nil {
		s.t.Fatal(err)
	}
	return s.settle(run.ID)
}

// settle waits for a run to stop moving.
func (s *site) settle(id string) api.RunView {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.eng.Watch(ctx, id, -1, func(engine.Event) error { return nil }); err != nil {
		s.t.Fatal(err)
	}
	v, err := s.eng.GetRun(ctx, id)
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

// A caller signs in with their token, sees their runs and a run's graph,
// decides its approval with a comment through a CSRF-protected form, and
// signs out; what an agent wrote is shown as text.
func TestConsole(t *testing.T) {
	t.Parallel()
	s := start(t)
	ctx := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	hostile := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	echo, err := s.eng.StartRun(ctx, engine.StartRequest{Pipeline: "echo", Inputs: map[string]any{"task": hostile}, Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	approval, err := s.eng.StartRun(ctx, engine.StartRequest{Pipeline: "approval", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s.settle(echo.ID)
	if v := s.settle(approval.ID); v.Status != runstate.RunWaiting {
		t.Fatalf("approval run is %s, want waiting", v.Status)
	}

	alice := s.browser()
	// No session: sent to sign in, and back after.
	if resp, _ := alice.get("/runs/" + approval.ID); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/signin?next=%2Fruns%2F"+approval.ID {
		t.Fatalf("without a session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, body := alice.post("/signin", url.Values{"token": {"not-a-token-at-all"}}); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not one of the orchestrator") {
		t.Errorf("a wrong token: %d", resp.StatusCode)
	}
	signedIn, _ := alice.post("/signin", url.Values{"token": {aliceToken}})
	cookie := signedIn.Header.Get("Set-Cookie")
	for _, want := range []string{"meshwork_session=YWxpY2U.", "HttpOnly", "SameSite=Strict", "Expires="} { // base64url("alice")
		if !strings.Contains(cookie, want) {
			t.Errorf("session cookie %q lacks %s", cookie, want)
		}
	}
	if strings.Contains(cookie, aliceToken) {
		t.Error("the session cookie holds the token")
	}

	// What the echo run's two attempts cost, as their agents reported it.
	if _, err := s.pool.Exec(context.Background(), `UPDATE node_attempts SET cost_usd = 0.125 WHERE run_id = $1`, echo.ID); err != nil {
		t.Fatal(err)
	}
	resp, runs := alice.get("/runs")
	if resp.StatusCode != http.StatusOK || !strings.Contains(runs, echo.ID[:8]) || !strings.Contains(runs, "‖ waiting") || !strings.Contains(runs, "$0.2500") {
		t.Errorf("runs page: %d\n%s", resp.StatusCode, runs)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	_, page := alice.get("/runs/" + echo.ID)
	for _, want := range []string{"<h2>Timeline</h2>", "<td>$0.1250</td><td></td></tr>", "session-" + echo.ID + "-a", "<summary>Its task</summary><pre>first: &lt;script&gt;"} {
		if !strings.Contains(page, want) {
			t.Errorf("the echo run's page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, "<img") || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;") {
		t.Errorf("the agent's output is not shown as text:\n%s", page)
	}
	_, page = alice.get("/runs/" + approval.ID)
	for _, want := range []string{"<svg", `class="node succeeded agent"`, `class="node waiting approval"`, "<line", "‖ waiting", "Waiting for a decision"} {
		if !strings.Contains(page, want) {
			t.Errorf("run page lacks %q", want)
		}
	}
	_, inbox := alice.get("/approvals")
	if !strings.Contains(inbox, approval.ID[:8]) {
		t.Errorf("the approvals inbox does not list the approval:\n%s", inbox)
	}

	interrupt := s.settle(approval.ID).Interrupts[0].ID
	// A POST without the session's CSRF token is refused.
	if resp, _ := alice.post("/interrupts/"+interrupt+"/resume", url.Values{"decision": {"approve"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a decision without the CSRF token: %d, want 403", resp.StatusCode)
	}
	// Another caller neither sees the run nor decides it.
	bob := s.browser()
	bob.signIn(bobToken)
	_, bobRuns := bob.get("/runs")
	if strings.Contains(bobRuns, approval.ID[:8]) {
		t.Error("bob's runs list alice's run")
	}
	if resp, _ := bob.get("/runs/" + approval.ID); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob opens alice's run: %d, want 404", resp.StatusCode)
	}
	if resp, _ := bob.post("/interrupts/"+interrupt+"/resume", url.Values{"decision": {"approve"}, "csrf": {csrfOf(t, bobRuns)}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob decides alice's approval: %d, want 404", resp.StatusCode)
	}
	// alice decides, with a comment.
	if resp, body := alice.post("/interrupts/"+interrupt+"/resume", url.Values{"decision": {"approve"}, "comment": {"ship it"}, "csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("alice's decision: %d %s", resp.StatusCode, body)
	}
	v := s.settle(approval.ID)
	if v.Status != runstate.RunSucceeded || v.Interrupts[0].DecidedBy != "alice" || v.Outputs["publish"] != "a: publish with approved: ship it" {
		t.Errorf("after the decision: %s, by %q, outputs %v", v.Status, v.Interrupts[0].DecidedBy, v.Outputs)
	}

	// Sign out ends the session.
	if resp, _ := alice.post("/signout", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("sign out: %d", resp.StatusCode)
	}
	if resp, _ := alice.get("/runs"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("after sign-out: %d, want a redirect to sign in", resp.StatusCode)
	}
	// The API is unchanged beside it.
	if resp, _ := alice.get("/v1/runs"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/v1/runs without a token: %d", resp.StatusCode)
	}
}

// A run started from its pipeline's form: the inputs as the form reads
// them, the engine's own refusal shown on the form, then the run's page.
func TestStartARunFromTheForm(t *testing.T) {
	t.Parallel()
	s := start(t)
	alice := s.browser()
	alice.signIn(aliceToken)
	if _, list := alice.get("/start"); !strings.Contains(list, `href="/start/echo"`) {
		t.Errorf("the pipelines to start:\n%s", list)
	}
	_, form := alice.get("/start/echo")
	for _, want := range []string{`name="input.task"`, "(string, required)", `name="input.tone"`, ">plain</textarea>"} {
		if !strings.Contains(form, want) {
			t.Errorf("the echo form lacks %q", want)
		}
	}
	csrf := csrfOf(t, form)
	if resp, _ := alice.post("/start/echo", url.Values{"input.task": {"x"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a start without the CSRF token: %d, want 403", resp.StatusCode)
	}
	resp, page := alice.post("/start/echo", url.Values{"csrf": {csrf}, "input.tone": {"bright"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "task") || !strings.Contains(page, ">bright</textarea>") {
		t.Errorf("a start without its required input: %d\n%s", resp.StatusCode, page)
	}
	resp, _ = alice.post("/start/echo", url.Values{"csrf": {csrf}, "input.task": {"from the form"}, "input.tone": {"plain"}})
	where := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(where, "/runs/") {
		t.Fatalf("start: %d to %q", resp.StatusCode, where)
	}
	v := s.settle(strings.TrimPrefix(where, "/runs/"))
	if v.Caller != "alice" || v.Inputs["task"] != "from the form" || v.Status != runstate.RunSucceeded {
		t.Errorf("the run started from the form: %+v", v.Run)
	}
}

// An approval that names its approver is in the approver's inbox, though
// the run is another caller's: the outputs it resumes with, no link to a page
// the approver cannot open, and the form that decides it. The run's own
// caller, who may not decide it, does not have it in theirs.
func TestInboxOfANamedApprover(t *testing.T) {
	t.Parallel()
	s := start(t)
	ctx := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	run, err := s.eng.StartRun(ctx, engine.StartRequest{Pipeline: "signoff", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if v := s.settle(run.ID); v.Status != runstate.RunWaiting {
		t.Fatalf("signoff run is %s, want waiting", v.Status)
	}
	alice := s.browser()
	alice.signIn(aliceToken)
	if _, inbox := alice.get("/approvals"); strings.Contains(inbox, run.ID[:8]) || !strings.Contains(inbox, "Nothing is waiting for your decision") {
		t.Errorf("alice's inbox lists an approval only bob decides:\n%s", inbox)
	}
	bob := s.browser()
	bob.signIn(bobToken)
	resp, inbox := bob.get("/approvals")
	if resp.StatusCode != http.StatusOK || !strings.Contains(inbox, run.ID[:8]) || !strings.Contains(inbox, "a: draft") ||
		!strings.Contains(inbox, "who named you to decide") || strings.Contains(inbox, `href="/runs/`+run.ID) {
		t.Fatalf("bob's inbox: %d\n%s", resp.StatusCode, inbox)
	}
	interrupt := s.settle(run.ID).Interrupts[0].ID
	if resp, body := bob.post("/interrupts/"+interrupt+"/resume", url.Values{"decision": {"approve"}, "comment": {"fine"}, "csrf": {csrfOf(t, inbox)}}); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/approvals" {
		t.Fatalf("bob's decision: %d to %q, want back to the inbox: %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if v := s.settle(run.ID); v.Status != runstate.RunSucceeded || v.Interrupts[0].DecidedBy != "bob" {
		t.Errorf("after bob's decision: %s, decided by %q", v.Status, v.Interrupts[0].DecidedBy)
	}
	if _, inbox := bob.get("/approvals"); strings.Contains(inbox, run.ID[:8]) {
		t.Error("a decided approval is still in bob's inbox")
	}
}

// A running run's page follows the run over the API's event stream, which
// takes the console's session cookie instead of a token for that one
// read-only route: a signed-in browser reads the stream of its own run;
// without the session, or for another caller's run, or on any other route,
// the cookie is no credential.
func TestEventStreamWithTheSession(t *testing.T) {
	t.Parallel()
	s := start(t)
	release := s.exec.Hold("first: slow")
	defer release()
	alice := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	run, err := s.eng.StartRun(alice, engine.StartRequest{Pipeline: "echo", Inputs: map[string]any{"task": "slow"}, Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	b := s.browser()
	b.signIn(aliceToken)
	_, page := b.get("/runs/" + run.ID)
	if !strings.Contains(page, `data-events="/v1/runs/`+run.ID+`/events?after=0"`) {
		t.Errorf("the running run's page does not follow it:\n%s", page)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/v1/runs/"+run.ID+"/events?after=0", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("the stream with the session: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	release()
	body, _ := io.ReadAll(resp.Body) // to the run's last event
	if !strings.Contains(string(body), "event: checkpoint") || !strings.Contains(string(body), "event: run") || !strings.Contains(string(body), `"status":"succeeded"`) {
		t.Errorf("the stream: %s", body)
	}

	if r, _ := s.browser().get("/v1/runs/" + run.ID + "/events"); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("without a session: %d", r.StatusCode)
	}
	bob := s.browser()
	bob.signIn(bobToken)
	if r, _ := bob.get("/v1/runs/" + run.ID + "/events"); r.StatusCode != http.StatusNotFound {
		t.Errorf("another caller's run: %d", r.StatusCode)
	}
	for _, path := range []string{"/v1/runs/" + run.ID, "/v1/runs", "/v1/runs/" + run.ID + "/checkpoints"} {
		if r, _ := b.get(path); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with only the session: %d", path, r.StatusCode)
		}
	}
	// Spellings of the path that are not the route get nothing from it.
	for _, path := range []string{"/v1/runs/" + run.ID + "/events/x", "/v1/runs/" + run.ID + "%2Fevents", "/v1/runs/" + run.ID + "/events/"} {
		if r, body := b.get(path); r.StatusCode == http.StatusOK {
			t.Errorf("GET %s with only the session: %d %.200s", path, r.StatusCode, body)
		}
	}
}

// A run forks from a checkpoint on its page: the fork form of each
// checkpoint, a patch of the inputs that the new run runs with, a patch
// that is not one refused with the reason, no fork without the CSRF token,
// and none of another caller's run.
func TestForkFromACheckpoint(t *testing.T) {
	t.Parallel()
	s := start(t)
	run := s.runAs("alice", "echo", map[string]any{"task": "first"})
	alice := s.browser()
	alice.signIn(aliceToken)
	_, page := alice.get("/runs/" + run.ID)
	for _, want := range []string{`action="/runs/` + run.ID + `/fork"`, `name="seq" value="0"`, `name="seq" value="2"`, "Fork from 1"} {
		if !strings.Contains(page, want) {
			t.Errorf("the run's page lacks %q", want)
		}
	}
	csrf := csrfOf(t, page)
	if resp, _ := alice.post("/runs/"+run.ID+"/fork", url.Values{"seq": {"0"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a fork without the CSRF token: %d, want 403", resp.StatusCode)
	}
	for patch, want := range map[string]string{
		`{"inputs": `:                       "not a state patch",
		`{"bogus": 1}`:                      "not a state patch",
		`{"inputs": {"task": 7}}`:           "task",
		`{"inputs": {"task": "a"}} {"x":1}`: "more than one JSON value",
	} {
		resp, body := alice.post("/runs/"+run.ID+"/fork", url.Values{"csrf": {csrf}, "seq": {"0"}, "patch": {patch}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("fork with patch %s: %d, want 400 saying %q:\n%s", patch, resp.StatusCode, want, body)
		}
	}
	if resp, _ := alice.post("/runs/"+run.ID+"/fork", url.Values{"csrf": {csrf}, "seq": {"99"}}); resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a fork from a checkpoint that does not exist: %d", resp.StatusCode)
	}
	resp, _ := alice.post("/runs/"+run.ID+"/fork", url.Values{"csrf": {csrf}, "seq": {"0"}, "patch": {`{"inputs": {"task": "again"}}`}})
	where := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(where, "/runs/") || where == "/runs/"+run.ID {
		t.Fatalf("fork: %d to %q", resp.StatusCode, where)
	}
	fork := s.settle(strings.TrimPrefix(where, "/runs/"))
	if fork.Caller != "alice" || fork.ForkedFromRun != run.ID || fork.Status != runstate.RunSucceeded || fork.Outputs["second"] != "b: second: a: first: again" {
		t.Errorf("the fork: %+v, outputs %v", fork.Run, fork.Outputs)
	}

	bob := s.browser()
	bob.signIn(bobToken)
	_, bobs := bob.get("/runs")
	if resp, _ := bob.post("/runs/"+run.ID+"/fork", url.Values{"csrf": {csrfOf(t, bobs)}, "seq": {"0"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob forking alice's run: %d, want 404", resp.StatusCode)
	}
}

// A run's page lists what its agents did last, newest first, as text: a
// call the gate refused marked, with why.
func TestRunPageListsTheAgentsEvents(t *testing.T) {
	t.Parallel()
	s := start(t)
	run := s.runAs("alice", "echo", map[string]any{"task": "x"})
	for _, ev := range []meshtype.AgentEvent{
		{Kind: "pre_tool", Tool: "Read", Text: "Reading <b>go.mod</b>", Decision: &meshtype.ToolDecision{Tool: "Read", Allowed: true}},
		{Kind: "pre_tool", Tool: "Bash", Text: "Running rm -rf /", Decision: &meshtype.ToolDecision{Tool: "Bash", Violations: []meshtype.Violation{{ConstraintID: "commands", Violated: true, Message: "rm is not allowed"}}}},
	} {
		if err := store.AddAgentEvent(context.Background(), s.pool, run.ID, "first", ev); err != nil {
			t.Fatal(err)
		}
	}
	alice := s.browser()
	alice.signIn(aliceToken)
	_, page := alice.get("/runs/" + run.ID)
	refused := strings.Index(page, `<li class="refused">`)
	read := strings.Index(page, "Reading &lt;b&gt;go.mod&lt;/b&gt;")
	if refused < 0 || read < 0 || refused > read || !strings.Contains(page, "Running rm -rf / (refused by the gate: rm is not allowed)") || strings.Contains(page, "<b>go.mod") {
		t.Errorf("the agents' events on the page (newest first, as text):\n%s", page)
	}
}

// A failed run's page offers to run its failed nodes again; the run's
// caller can, another caller cannot.
func TestResumeAFailedRun(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	failing.Store(true)
	s := startWithExecutor(t, enginetest.Pipelines, &enginetest.InstantExecutor{Record: true, Reply: func(req executor.Request) (string, error) {
		if req.NodeID == "second" && failing.Load() {
			return "", errors.New("the agent gave up")
		}
		return req.RoleName + ": " + req.Task, nil
	}})
	run := s.runAs("alice", "echo", map[string]any{"task": "t"})
	if run.Status != runstate.RunFailed {
		t.Fatalf("the run is %s, want failed", run.Status)
	}
	alice, bob := s.browser(), s.browser()
	alice.signIn(aliceToken)
	bob.signIn(bobToken)
	_, page := alice.get("/runs/" + run.ID)
	if !strings.Contains(page, "Run the failed nodes again") || !strings.Contains(page, "the agent gave up") {
		t.Fatalf("the failed run's page:\n%s", page)
	}
	_, bobs := bob.get("/runs")
	if resp, _ := bob.post("/runs/"+run.ID+"/resume", url.Values{"csrf": {csrfOf(t, bobs)}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob resumed alice's run: %d, want 404", resp.StatusCode)
	}
	if resp, _ := alice.post("/runs/"+run.ID+"/resume", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a resume without the CSRF token: %d, want 403", resp.StatusCode)
	}
	failing.Store(false)
	resp, _ := alice.post("/runs/"+run.ID+"/resume", url.Values{"csrf": {csrfOf(t, page)}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/runs/"+run.ID {
		t.Fatalf("alice's resume: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if v := s.settle(run.ID); v.Status != runstate.RunSucceeded || v.Outputs["second"] != "b: second: a: first: t" {
		t.Errorf("after the resume: %s, outputs %v", v.Status, v.Outputs)
	}
}

// A form sent from another site is refused before it is read, the sign-in
// among them (a page elsewhere could sign a browser in as its own
// caller); a form is URL-encoded and at most a MiB.
func TestFormsFromElsewhere(t *testing.T) {
	t.Parallel()
	s := start(t)
	post := func(header http.Header, body io.Reader) (reply, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, s.url+"/signin", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{resp.StatusCode, resp.Header}, string(b)
	}
	form := func() io.Reader { return strings.NewReader(url.Values{"token": {aliceToken}}.Encode()) }
	urlencoded := "application/x-www-form-urlencoded"
	for name, h := range map[string]http.Header{
		"Sec-Fetch-Site cross-site": {"Content-Type": {urlencoded}, "Sec-Fetch-Site": {"cross-site"}},
		"Origin elsewhere":          {"Content-Type": {urlencoded}, "Origin": {"https://evil.example"}},
	} {
		resp, body := post(h, form())
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Set-Cookie") != "" || !strings.Contains(body, "from another site") {
			t.Errorf("a sign-in with %s: %d, cookie %q\n%s", name, resp.StatusCode, resp.Header.Get("Set-Cookie"), body)
		}
	}
	if resp, _ := post(http.Header{"Content-Type": {urlencoded}, "Sec-Fetch-Site": {"same-origin"}}, form()); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Set-Cookie") == "" {
		t.Errorf("a sign-in from the console's own page: %d", resp.StatusCode)
	}
	multipart := "multipart/form-data; boundary=x"
	resp, body := post(http.Header{"Content-Type": {multipart}}, strings.NewReader("--x\r\nContent-Disposition: form-data; name=\"token\"\r\n\r\n"+aliceToken+"\r\n--x--\r\n"))
	if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("a multipart sign-in: %d\n%s", resp.StatusCode, body)
	}
	resp, body = post(http.Header{"Content-Type": {"text/plain"}}, form())
	if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("a text/plain sign-in: %d\n%s", resp.StatusCode, body)
	}
	resp, body = post(http.Header{"Content-Type": {urlencoded}}, strings.NewReader("token="+strings.Repeat("a", 2<<20)))
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "larger than") {
		t.Errorf("a 2 MiB sign-in: %d\n%s", resp.StatusCode, body)
	}

	// Signing out forgets an archive a stop kept for the journeys page.
	alice := s.browser()
	alice.signIn(aliceToken)
	_, page := alice.get("/runs")
	resp2, _ := alice.post("/signout", url.Values{"csrf": {csrfOf(t, page)}})
	if c := strings.Join(resp2.Header.Values("Set-Cookie"), "\n"); !strings.Contains(c, "meshwork_archived=;") || !strings.Contains(c, "Max-Age=0") {
		t.Errorf("sign out's cookies:\n%s", c)
	}
}
