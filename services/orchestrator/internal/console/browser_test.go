package console_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// chromium finds Debian's chromium; without it the test is skipped, unless
// MESHWORK_REQUIRE_CHROMIUM is set (CI installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("MESHWORK_REQUIRE_CHROMIUM") != "" {
		t.Fatal("chromium is not installed (apt-get install chromium)")
	}
	t.Skip("chromium is not installed (apt-get install chromium)")
	return ""
}

// screenshots is where the browser test saves its pages:
// MESHWORK_SCREENSHOTS, else the test's temporary directory.
func screenshots(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("MESHWORK_SCREENSHOTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// The console in a real browser, at 1280×800 and on a narrow screen: a
// request without a session lands on sign-in; the shipped research
// pipeline started from its form, whose graph goes through its revise loop
// to the approval node while the page is watched, without a reload; the runs list; a run's graph;
// an approval decided with a comment through the form, after which the run
// succeeds; an agent's hostile output shown as text (no script runs, no
// dialog opens, no image is made). Each page is saved as a screenshot.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	dir := screenshots(t)
	s := startWith(t, withShipped(t))
	viewer := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	hostile := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	echo, err := s.eng.StartRun(viewer, engine.StartRequest{Pipeline: "echo", Inputs: map[string]any{"task": hostile}, Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s.settle(echo.ID)

	ctx, shot, step := openBrowser(t, chrome, dir)
	dialogs := make(chan string, 4)
	chromedp.ListenTarget(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs <- d.Message
		}
	})

	// The research waits until the page is watched: the graph then goes
	// through the writer, the reviewer and the bounded revise loop to the
	// approval node by itself.
	const task = "How does Go's scheduler work?"
	release := s.exec.Hold(task)
	defer release()
	var url, started, runs, graph string
	var stayed, loops int
	step("sign in and start",
		chromedp.Navigate(s.url+"/runs"),
		chromedp.WaitVisible(`#token`),
		chromedp.Location(&url),
		shot("signin"),
		chromedp.SendKeys(`#token`, aliceToken),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`main table`),
		// The shipped research pipeline, started from its form.
		chromedp.Navigate(s.url+"/start/research_pipeline"),
		chromedp.WaitVisible(`#input-task`),
		chromedp.SendKeys(`#input-task`, task),
		shot("start"),
		chromedp.Click(`main form button[type=submit], main form button`),
		chromedp.WaitVisible(`figure.graph g.node.running`),
		chromedp.Location(&started),
		chromedp.Evaluate(`window.meshworkStayed = 7`, nil),
		shot("run-graph-running"),
	)
	release()
	step("the graph reaches the approval live",
		chromedp.WaitVisible(`figure.graph g.node.waiting.approval`),
		chromedp.Evaluate(`window.meshworkStayed || 0`, &stayed),
		shot("run-graph-approval-live"),
	)
	if stayed != 7 {
		t.Errorf("the page was reloaded (window value %d), not updated in place", stayed)
	}
	approvalID := started[strings.LastIndex(started, "/")+1:]
	approval := s.settle(approvalID)
	if approval.Status != runstate.RunWaiting || approval.Caller != "alice" {
		t.Fatalf("the run started in the browser (%s) is %s, by %q", started, approval.Status, approval.Caller)
	}
	step("runs and graph",
		chromedp.Navigate(s.url+"/runs"),
		chromedp.WaitVisible(`main table`),
		chromedp.Text(`main table`, &runs),
		shot("runs"),
		chromedp.Navigate(s.url+"/runs/"+approval.ID),
		chromedp.WaitVisible(`figure.graph svg`),
		chromedp.TextContent(`figure.graph svg`, &graph),
		chromedp.Evaluate(`document.querySelectorAll("figure.graph path.loop").length`, &loops),
		shot("run-graph"),
	)
	if !strings.Contains(url, "/signin?next=") {
		t.Errorf("without a session the browser is at %s, want sign-in", url)
	}
	if !strings.Contains(runs, approval.ID[:8]) || !strings.Contains(runs, "waiting") {
		t.Errorf("the runs table: %q", runs)
	}
	if !strings.Contains(graph, "approve") || !strings.Contains(graph, "waiting") || !strings.Contains(graph, "succeeded") || !strings.Contains(graph, "revise goes back to write") {
		t.Errorf("the graph's text: %q", graph)
	}
	if loops != 1 {
		t.Errorf("the graph draws %d loops, want revise's", loops)
	}

	// Decide in the approvals inbox, through its form, as a person would.
	var inbox string
	step("the approvals inbox",
		chromedp.Navigate(s.url+"/approvals"),
		chromedp.WaitVisible(`main section.card form.decide`),
		chromedp.Text(`main`, &inbox),
		shot("approvals"),
	)
	if !strings.Contains(inbox, approval.ID[:8]) || !strings.Contains(inbox, "approve") {
		t.Errorf("the approvals inbox: %q", inbox)
	}
	// The click makes the page navigate by itself; a query spanning a
	// navigation the page started can miss the new document and wait
	// forever (it hung CI twice), so the decision is read from the engine,
	// and the page is then loaded afresh.
	step("approve",
		chromedp.SendKeys(`input[name=comment]`, "ship it"),
		chromedp.Click(`button[value=approve]`),
	)
	v := s.settle(approval.ID)
	for deadline := time.Now().Add(30 * time.Second); v.Status != runstate.RunSucceeded && time.Now().Before(deadline); v = s.settle(approval.ID) {
		time.Sleep(50 * time.Millisecond)
	}
	if v.Status != runstate.RunSucceeded || v.Interrupts[0].DecidedBy != "alice" || v.Outputs["approve"] != "approved: ship it" || v.Outputs["research"] != "researcher: "+task {
		t.Errorf("after deciding in the browser: %s, by %q, outputs %v", v.Status, v.Interrupts[0].DecidedBy, v.Outputs)
	}
	var made, asks int
	// One page a step: each step has its own deadline, which a loaded
	// machine needs for a page and its screenshot.
	step("after the decision",
		chromedp.Navigate(s.url+"/runs/"+approval.ID),
		chromedp.WaitVisible(`span.status.succeeded`),
		chromedp.Evaluate(`document.querySelectorAll("button[value=approve]").length`, &asks),
		shot("run-succeeded"),
	)
	step("the agent's hostile output",
		chromedp.Navigate(s.url+"/runs/"+echo.ID),
		chromedp.WaitVisible(`main pre`),
		chromedp.Evaluate(`document.querySelectorAll("main script, main img").length`, &made),
		shot("hostile-output"),
	)
	// The screen's worth, not the whole page: this run's timeline makes a
	// page many screens tall at this width, and its full screenshot alone
	// could pass the step's deadline on a loaded machine.
	var narrow []byte
	step("a narrow screen",
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(s.url+"/runs/"+approval.ID),
		chromedp.WaitVisible(`h1`),
		chromedp.CaptureScreenshot(&narrow),
	)
	if err := os.WriteFile(filepath.Join(dir, "run-narrow.png"), narrow, 0o644); err != nil {
		t.Fatal(err)
	}
	if asks != 0 {
		t.Errorf("the decided run's page still asks for a decision (%d buttons)", asks)
	}
	if made != 0 {
		t.Errorf("the agent's output made %d elements", made)
	}
	select {
	case msg := <-dialogs:
		t.Errorf("a dialog opened: %q", msg)
	default:
	}
	t.Logf("screenshots in %s", dir)
}

// openBrowser starts chromium for t, stopped when t ends, and returns its
// context, an action that saves a screenshot of the page in dir, and step,
// which runs actions under a deadline and, when they fail, says where the
// browser is and what it shows, and saves that page.
func openBrowser(t *testing.T, chrome, dir string) (context.Context, func(name string) chromedp.Action, func(name string, actions ...chromedp.Action)) {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	// The browser starts on ctx itself: the first Run's context owns it, and
	// each step runs under its own deadline.
	if err := chromedp.Run(ctx); err != nil {
		t.Fatal(err)
	}
	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil { // quality 100: PNG
				return err
			}
			return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
		})
	}
	step := func(name string, actions ...chromedp.Action) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 45*time.Second)
		defer cancel()
		err := chromedp.Run(sctx, actions...)
		if err == nil {
			return
		}
		var at, body string
		lctx, cancelLook := context.WithTimeout(ctx, 10*time.Second)
		defer cancelLook()
		_ = chromedp.Run(lctx, chromedp.Location(&at), chromedp.Text(`body`, &body, chromedp.ByQuery), shot("failed-"+name))
		t.Fatalf("%s: %v; the browser is at %s, showing %.1500q", name, err, at, body)
	}
	return ctx, shot, step
}

// A running run's page in a browser in Tokyo: its times are in the
// viewer's time zone, and it follows the run over the event stream, from
// running to succeeded, without a reload (a value set on the page's window
// survives).
func TestRunPageFollowsTheRunInABrowser(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	dir := screenshots(t)
	s := start(t)
	release := s.exec.Hold("first: live")
	defer release()
	viewer := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	run, err := s.eng.StartRun(viewer, engine.StartRequest{Pipeline: "echo", Inputs: map[string]any{"task": "live"}, Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	_, shot, step := openBrowser(t, chrome, dir)

	var started, status string
	var stayed int
	step("sign in in Tokyo",
		emulation.SetTimezoneOverride("Asia/Tokyo"),
		chromedp.Navigate(s.url+"/signin?next=/runs"),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, aliceToken),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`main table`),
	)
	step("the running run",
		chromedp.Navigate(s.url+"/runs/"+run.ID),
		chromedp.WaitVisible(`main .live`),
		chromedp.Evaluate(`document.querySelector("dl.facts time").textContent`, &started),
		chromedp.Evaluate(`window.meshworkStayed = 42`, nil),
		shot("run-live-running"),
	)
	if !strings.Contains(started, "GMT+9") {
		t.Errorf("the start time in Tokyo reads %q, want the viewer's time zone (GMT+9)", started)
	}
	// The agent works: its events come into the page's list as they
	// happen, as text, a refused call marked.
	ctx := context.Background()
	for _, ev := range []meshtype.AgentEvent{
		{Kind: "pre_tool", Tool: "Edit", Text: "Editing main.go", Decision: &meshtype.ToolDecision{Tool: "Edit", Summary: "Editing main.go", Allowed: true}},
		{Kind: "pre_tool", Tool: "Bash", Text: `Running <img src=x onerror=alert(3)>`, Decision: &meshtype.ToolDecision{Tool: "Bash", Allowed: false, Violations: []meshtype.Violation{{ConstraintID: "commands", Violated: true, Message: "command not allowed"}}}},
	} {
		if err := store.AddAgentEvent(ctx, s.pool, run.ID, "first", ev); err != nil {
			t.Fatal(err)
		}
	}
	var agentText string
	var made int
	step("the agent's events",
		chromedp.WaitVisible(`ol.agent-events li.refused`),
		chromedp.Evaluate(`document.querySelector("ol.agent-events").textContent`, &agentText),
		chromedp.Evaluate(`document.querySelectorAll("ol.agent-events img, ol.agent-events script").length`, &made),
		chromedp.Evaluate(`window.meshworkStayed || 0`, &stayed),
		shot("run-live-agent-events"),
	)
	if !strings.Contains(agentText, "first Editing main.go") || !strings.Contains(agentText, "refused by the gate: command not allowed") || made != 0 || stayed != 42 {
		t.Errorf("the agent's events: %q (%d elements made, window value %d)", agentText, made, stayed)
	}
	release()
	// Read in one script: the page may swap its main part again between
	// two queries (an event after the last), which empties a node read.
	step("the run goes on by itself",
		chromedp.WaitVisible(`h1 span.status.succeeded`),
		chromedp.Evaluate(`document.querySelector("h1 span.status").textContent`, &status),
		chromedp.Evaluate(`window.meshworkStayed || 0`, &stayed),
		shot("run-live-succeeded"),
	)
	if stayed != 42 {
		t.Errorf("the page was reloaded (window value %d), not updated in place", stayed)
	}
	if !strings.Contains(status, "succeeded") {
		t.Errorf("the status after the run ended: %q", status)
	}
}

// The rest of the console in a real browser, beside a real marketplace:
// alice's journeys and a journey's audit log (a refusal and its reason); a
// run's patch, its files with their line counts and side by side; a fork
// from a checkpoint with a patch of the inputs; and bob, signed in
// elsewhere, who sees none of alice's runs, approvals or journeys. Each
// page is saved as a screenshot.
func TestJourneysPatchAndForkInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and the worker image")
	}
	t.Parallel()
	chrome := chromium(t)
	dir := screenshots(t)
	s, mp := startWithMarketplace(t, withChange(), &enginetest.InstantExecutor{Record: true, Patch: patchOf})
	viewer := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	change, err := s.eng.StartRun(viewer, engine.StartRequest{
		Pipeline: "change", Caller: "alice",
		Inputs: map[string]any{"repository": map[string]any{"git": map[string]any{"url": "/sources/calc", "ref": "main"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	echo, err := s.eng.StartRun(viewer, engine.StartRequest{Pipeline: "echo", Inputs: map[string]any{"task": "original"}, Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	approval, err := s.eng.StartRun(viewer, engine.StartRequest{Pipeline: "approval", Caller: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s.settle(change.ID)
	s.settle(echo.ID)
	s.settle(approval.ID)

	alice := mcpClient(t, mp.Endpoint, aliceToken)
	callTool(t, alice, meshapi.ToolSpawnWorker, map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "browser-j"})
	callTool(t, alice, meshapi.ToolExecuteInWorker, map[string]any{"journey_id": "browser-j", "action": map[string]any{"type": "write", "target": "notes.txt", "content": "hi"}})
	if res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: meshapi.ToolExecuteInWorker, Arguments: map[string]any{"journey_id": "browser-j", "action": map[string]any{"type": "read", "target": "../../etc/passwd"}}}); err != nil || !res.IsError {
		t.Fatalf("the read was not refused: %v %+v", err, res)
	}

	_, shot, step := openBrowser(t, chrome, dir)
	var journeys, audit, files, sbs string
	var made int
	step("sign in and see the journeys",
		chromedp.Navigate(s.url+"/signin?next=/journeys"),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, aliceToken),
		chromedp.Submit(`#token`),
		chromedp.WaitVisible(`main table`),
		chromedp.Text(`main table`, &journeys),
		shot("journeys"),
		chromedp.Navigate(s.url+"/journeys/browser-j"),
		chromedp.WaitVisible(`table.audit`),
		chromedp.Text(`table.audit`, &audit),
		shot("journey-audit"),
	)
	if !strings.Contains(journeys, "browser-j") || !strings.Contains(journeys, "active") {
		t.Errorf("the journeys table: %q", journeys)
	}
	if !strings.Contains(audit, "refused") || !strings.Contains(audit, "path_safety") || !strings.Contains(audit, "notes.txt") {
		t.Errorf("the audit log: %q", audit)
	}
	step("the run's patch",
		chromedp.Navigate(s.url+"/runs/"+change.ID),
		chromedp.WaitVisible(`table.sbs`),
		chromedp.Text(`ul.files`, &files),
		chromedp.Text(`table.sbs`, &sbs),
		chromedp.Evaluate(`document.querySelectorAll("main script, table.sbs b").length`, &made),
		shot("patch"),
	)
	if !strings.Contains(files, "calc/add.go") || !strings.Contains(files, "+2") || !strings.Contains(files, "−1") {
		t.Errorf("the patch's files: %q", files)
	}
	if !strings.Contains(sbs, "return a - b") || !strings.Contains(sbs, "<script>alert(4)</script>") || made != 0 {
		t.Errorf("the patch side by side: %q (%d elements made)", sbs, made)
	}

	// Fork the echo run from its start with other inputs. The click makes
	// the page navigate by itself: the fork is read from the engine.
	step("fork",
		chromedp.Navigate(s.url+"/runs/"+echo.ID),
		chromedp.WaitVisible(`#patch-0`),
		chromedp.SendKeys(`#patch-0`, `{"inputs": {"task": "forked"}}`),
		shot("fork-form"),
		chromedp.Click(`#patch-0 ~ button`),
	)
	forked := waitFork(t, s, echo.ID)
	if v := s.settle(forked.ID); v.Status != runstate.RunSucceeded || v.Outputs["first"] != "a: first: forked" {
		t.Errorf("the fork: %s, outputs %v", v.Status, v.Outputs)
	}

	// Bob, signed in elsewhere, sees none of it.
	_, bobShot, bobStep := openBrowser(t, chrome, dir)
	var bobRuns, bobApprovals, bobRun, bobJourneys string
	bobStep("bob",
		chromedp.Navigate(s.url+"/signin?next=/runs"),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, bobToken),
		chromedp.Submit(`#token`),
		// Signed in: the sign-in page has a main h1 too, and navigating
		// on before its form's answer arrived would abort that answer.
		chromedp.WaitVisible(`form.signout`),
		chromedp.WaitVisible(`main h1`),
		chromedp.Text(`main`, &bobRuns),
		chromedp.Navigate(s.url+"/approvals"),
		chromedp.WaitVisible(`main h1`),
		chromedp.Text(`main`, &bobApprovals),
		chromedp.Navigate(s.url+"/runs/"+approval.ID),
		chromedp.WaitVisible(`main`),
		chromedp.Text(`main`, &bobRun),
		bobShot("bob-alices-run"),
		chromedp.Navigate(s.url+"/journeys"),
		chromedp.WaitVisible(`main h1`),
		chromedp.Text(`main`, &bobJourneys),
	)
	if strings.Contains(bobRuns, echo.ID[:8]) || strings.Contains(bobRuns, approval.ID[:8]) {
		t.Errorf("bob's runs list alice's: %q", bobRuns)
	}
	if !strings.Contains(bobApprovals, "Nothing is waiting for your decision") {
		t.Errorf("bob's approvals: %q", bobApprovals)
	}
	if !strings.Contains(bobRun, "No such run") || strings.Contains(bobRun, "Approve") {
		t.Errorf("bob opened alice's run: %q", bobRun)
	}
	if strings.Contains(bobJourneys, "browser-j") || !strings.Contains(bobJourneys, "No journeys") {
		t.Errorf("bob's journeys list alice's: %q", bobJourneys)
	}
	t.Logf("screenshots in %s", dir)
}

// waitFork waits for alice's run forked from parent to appear.
func waitFork(t *testing.T, s *site, parent string) api.Run {
	t.Helper()
	viewer := engine.WithViewer(context.Background(), engine.Viewer{Caller: "alice"})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		runs, err := s.eng.ListRuns(viewer, store.ListFilter{Pipeline: "echo", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.ForkedFromRun == parent {
				return r
			}
		}
	}
	t.Fatalf("no fork of %s appeared", parent)
	return api.Run{}
}
