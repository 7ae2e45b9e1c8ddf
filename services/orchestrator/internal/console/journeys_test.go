package console_test

import (
	"context"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/journeyview"
	"github.com/meshwork/meshwork/services/orchestrator/internal/marketplacetest"
)

// startWithMarketplace is start with a real marketplace beside it, whose
// callers alice and bob have the same tokens as at the orchestrator, and
// whose delegate is the orchestrator: the console shows each their own
// journeys.
func startWithMarketplace(t *testing.T, pipelines fs.FS, x *enginetest.InstantExecutor) (*site, *marketplacetest.Marketplace) {
	t.Helper()
	eb := enginetest.StartWithExecutor(t, pipelines, x)
	mp := marketplacetest.Start(t, eb.DSN, marketplacetest.Options{
		Tokens: map[string]string{"alice": aliceToken, "bob": bobToken},
		Args:   []string{"--delegates", "orchestrator"},
	})
	jv, err := journeyview.New(journeyview.Config{Endpoint: mp.Endpoint, Token: marketplacetest.Token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = jv.Close() })
	return serve(t, eb, jv), mp
}

// mcpClient connects to the marketplace as the token's caller.
func mcpClient(t *testing.T, endpoint, token string) *mcp.ClientSession {
	t.Helper()
	return mcptest.Connect(t, endpoint, token, nil)
}

// callTool calls a tool that must succeed and returns its text.
func callTool(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s %v: %v %s", tool, args, err, meshapi.ResultText(res))
	}
	return meshapi.ResultText(res)
}

// The journeys pages show the signed-in caller's journeys and audit log,
// from the marketplace, as text; another caller sees none of them and
// cannot stop them; a stop keeps, archives or deletes, with the CSRF token.
func TestJourneysPages(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker and the worker image")
	}
	s, mp := startWithMarketplace(t, enginetest.Pipelines, &enginetest.InstantExecutor{Record: true})
	alice := mcpClient(t, mp.Endpoint, aliceToken)
	callTool(t, alice, meshapi.ToolSpawnWorker, map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "console-j"})
	callTool(t, alice, meshapi.ToolExecuteInWorker, map[string]any{"journey_id": "console-j", "action": map[string]any{"type": "write", "target": "notes<b>bold</b>.txt", "content": "hi"}})
	res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: meshapi.ToolExecuteInWorker, Arguments: map[string]any{"journey_id": "console-j", "action": map[string]any{"type": "read", "target": "../../etc/passwd"}}})
	if err != nil || !res.IsError || !strings.Contains(meshapi.ResultText(res), `"executed":false`) {
		t.Fatalf("the read was not refused: %v %+v", err, res)
	}

	a := s.browser()
	a.signIn(aliceToken)
	resp, list := a.get("/journeys")
	if resp.StatusCode != http.StatusOK || !strings.Contains(list, `href="/journeys/console-j"`) || !strings.Contains(list, "filesystem_write_v1") || !strings.Contains(list, "▶ active") {
		t.Fatalf("alice's journeys: %d\n%s", resp.StatusCode, list)
	}
	if _, stopped := a.get("/journeys?state=stopped"); strings.Contains(stopped, "console-j") {
		t.Errorf("the stopped journeys list the active one")
	}
	if resp, _ := a.get("/journeys?state=sleeping"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("an unknown state: %d, want 400", resp.StatusCode)
	}
	resp, page := a.get("/journeys/console-j")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's journey: %d\n%s", resp.StatusCode, page)
	}
	for _, want := range []string{"../../etc/passwd", "⊘ refused", "✓ allowed", "notes&lt;b&gt;bold&lt;/b&gt;.txt", "1 run, 1 refused, 0 failed"} {
		if !strings.Contains(page, want) {
			t.Errorf("alice's journey page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "<b>bold") {
		t.Errorf("a file name became markup")
	}

	b := s.browser()
	b.signIn(bobToken)
	if resp, list := b.get("/journeys"); resp.StatusCode != http.StatusOK || strings.Contains(list, "console-j") || !strings.Contains(list, "No journeys") {
		t.Errorf("bob's journeys: %d\n%s", resp.StatusCode, list)
	}
	resp, bobs := b.get("/journeys/console-j")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob opened alice's journey: %d", resp.StatusCode)
	}
	if resp, _ := b.post("/journeys/console-j/stop", url.Values{"csrf": {csrfOf(t, bobs)}, "workspace": {"delete"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("bob's stop of alice's journey: %d, want 404", resp.StatusCode)
	}
	if resp, _ := a.post("/journeys/console-j/stop", url.Values{"workspace": {"delete"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a stop without the CSRF token: %d, want 403", resp.StatusCode)
	}
	if resp, _ := a.post("/journeys/console-j/stop", url.Values{"csrf": {csrfOf(t, page)}, "workspace": {"patch"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a stop in patch mode: %d, want 400", resp.StatusCode)
	}
	if text := callTool(t, alice, meshapi.ToolGetWorkerState, map[string]any{"journey_id": "console-j"}); !strings.Contains(text, `"state":"active"`) {
		t.Fatalf("refused stops stopped the journey: %s", text)
	}
	resp, _ = a.post("/journeys/console-j/stop", url.Values{"csrf": {csrfOf(t, page)}, "workspace": {"keep"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/journeys/console-j" {
		t.Fatalf("alice's stop: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, page := a.get("/journeys/console-j"); !strings.Contains(page, "■ stopped") || !strings.Contains(page, "Apply to the workspace") {
		t.Errorf("after the stop:\n%s", page)
	}
	resp, _ = a.post("/journeys/console-j/stop", url.Values{"csrf": {csrfOf(t, page)}, "workspace": {"archive"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/journeys" {
		t.Fatalf("alice's archive: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The page it leads to says where the archive is, once.
	_, archived := a.get("/journeys")
	if !strings.Contains(archived, "Journey console-j's workspace was archived on the marketplace's host to <code>") || !strings.Contains(archived, "SHA-256 <code>") {
		t.Fatalf("the journeys page after the archive:\n%s", archived)
	}
	if _, again := a.get("/journeys"); strings.Contains(again, "was archived") {
		t.Errorf("the archive's notice shows again on a reload")
	}
	if resp, _ := a.get("/journeys/console-j"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the archived journey: %d, want 404", resp.StatusCode)
	}
	callTool(t, alice, meshapi.ToolSpawnWorker, map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "console-k"})
	resp, _ = a.post("/journeys/console-k/stop", url.Values{"csrf": {csrfOf(t, page)}, "workspace": {"delete"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/journeys" {
		t.Fatalf("alice's delete: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := a.get("/journeys/console-k"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the deleted journey: %d, want 404", resp.StatusCode)
	}
}

// Without a marketplace the journeys page says how to get one.
func TestJourneysWithoutAMarketplace(t *testing.T) {
	s := start(t)
	a := s.browser()
	a.signIn(aliceToken)
	resp, page := a.get("/journeys")
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, "--marketplace-url") {
		t.Errorf("journeys without a marketplace: %d\n%s", resp.StatusCode, page)
	}
	if resp, _ := a.get("/journeys/any"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("a journey without a marketplace: %d, want 404", resp.StatusCode)
	}
}
