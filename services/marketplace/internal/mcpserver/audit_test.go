package mcpserver_test

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshapi"
)

// journey_audit pages through a journey's log newest first: each action
// with its decision and violations, the result taken out, and nothing of
// another caller's journey.
func TestJourneyAudit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice, bob := b.client(t, aliceToken), b.client(t, bobToken)
	must(t, alice, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "audited"})
	must(t, alice, "execute_in_worker", execArgs("audited", map[string]any{"type": "write", "target": "a.txt", "content": "a"}))
	if r := call(t, alice, "execute_in_worker", execArgs("audited", map[string]any{"type": "read", "target": "../../etc/passwd"})); !r.isError || r.out["executed"] != false {
		t.Fatalf("the refused read: %+v", r)
	}
	must(t, alice, "workspace_diff", map[string]any{"journey_id": "audited"})

	first := must(t, alice, "journey_audit", map[string]any{"journey_id": "audited", "limit": 2})
	entries := asList(first["entries"])
	if len(entries) != 2 || first["next_before"] == nil {
		t.Fatalf("first page: %v", first)
	}
	diff, refused := entries[0].(map[string]any), entries[1].(map[string]any)
	if diff["type"] != "workspace_diff" || diff["decision"] != "allowed" {
		t.Errorf("newest entry: %v, want the allowed diff", diff)
	}
	if refused["type"] != "read" || refused["decision"] != "refused" || refused["target"] != "../../etc/passwd" || len(asList(refused["violations"])) == 0 || refused["caller"] != "alice" {
		t.Errorf("second entry: %v, want alice's refused read with its violations", refused)
	}
	second := must(t, alice, "journey_audit", map[string]any{"journey_id": "audited", "before": first["next_before"]})
	rest := asList(second["entries"])
	if len(rest) != 1 || second["next_before"] != nil {
		t.Fatalf("second page: %v", second)
	}
	if w := rest[0].(map[string]any); w["type"] != "write" || w["decision"] != "allowed" || w["target"] != "a.txt" || w["id"].(float64) >= refused["id"].(float64) {
		t.Errorf("oldest entry: %v", w)
	}

	if r := call(t, bob, "journey_audit", map[string]any{"journey_id": "audited"}); !r.isError || errorCode(r) != string(meshapi.CodeNotFound) {
		t.Errorf("bob read alice's audit log: %+v", r)
	}
	if r := call(t, alice, "journey_audit", map[string]any{"journey_id": "../etc"}); !r.isError || errorCode(r) != string(meshapi.CodeInvalidArgument) {
		t.Errorf("an id that cannot be: %+v, want invalid_argument", r)
	}
	for _, args := range []map[string]any{
		{"journey_id": "audited", "limit": meshapi.MaxPageLimit + 1},
		{"journey_id": "audited", "before": -1},
	} {
		if r := call(t, alice, "journey_audit", args); !r.isError || errorCode(r) != string(meshapi.CodeInvalidArgument) {
			t.Errorf("journey_audit %v: %+v, want invalid_argument", args, r)
		}
	}
}

// An exec's audit row names the command it asked for, refused or not, with
// each argument quoted so that its bounds show.
func TestJourneyAuditNamesAnExecsCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cs := b.client(t, aliceToken)
	must(t, cs, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "execs"})
	// filesystem_write_v1 runs no commands: the gate refuses it.
	argv := []string{"rm", "-rf", "a b", "x\ny", strings.Repeat("k", 2000)}
	if r := call(t, cs, "execute_in_worker", execArgs("execs", map[string]any{"type": "exec", "command": argv})); !r.isError || r.out["executed"] != false {
		t.Fatalf("an exec on a worker without commands: %+v", r)
	}
	entries := asList(must(t, cs, "journey_audit", map[string]any{"journey_id": "execs"})["entries"])
	if len(entries) != 1 {
		t.Fatalf("audit entries %v, want the refused exec", entries)
	}
	e := entries[0].(map[string]any)
	target, _ := e["target"].(string)
	if e["type"] != "exec" || e["decision"] != "refused" || !strings.HasPrefix(target, `rm -rf 'a b' $'x\ny' kkk`) || !strings.HasSuffix(target, "…") || len(target) > 1100 {
		t.Errorf("the exec's audit entry: %v", e)
	}
}

// A delegate acts for the caller it names in _meta, and sees what that
// caller would; anyone else naming a caller is refused.
func TestDelegateActsOnBehalfOfACaller(t *testing.T) {
	t.Parallel()
	const consoleToken = "console-token-0123456789abcdef"
	b := setupWith(t, &bundle{delegates: []string{"console"}})
	if err := b.store.PutToken(context.Background(), "console", bearer.Hash(consoleToken), nil); err != nil {
		t.Fatal(err)
	}
	alice, bob, console := b.client(t, aliceToken), b.client(t, bobToken), b.client(t, consoleToken)
	must(t, alice, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "alices"})

	onBehalf := func(cs *mcp.ClientSession, who any, tool string, args map[string]any) (*mcp.CallToolResult, error) {
		return cs.CallTool(context.Background(), &mcp.CallToolParams{Meta: mcp.Meta{meshapi.OnBehalfOfMetaKey: who}, Name: tool, Arguments: args})
	}
	res, err := onBehalf(console, "alice", "list_journeys", map[string]any{})
	if err != nil || res.IsError {
		t.Fatalf("the console for alice: %v %+v", err, res)
	}
	if got := mustJSON(t, res.StructuredContent); !strings.Contains(got, `"journey_id":"alices"`) {
		t.Errorf("the console for alice lists %s", got)
	}
	if res, err = onBehalf(console, "bob", "journey_audit", map[string]any{"journey_id": "alices"}); err != nil || !res.IsError {
		t.Errorf("the console for bob read alice's journey: %v %+v", err, res)
	} else if e, _ := meshapi.ErrorOf(res); e.Code != meshapi.CodeNotFound {
		t.Errorf("the console for bob reading alice's journey: %+v, want not_found", e)
	}
	if l := must(t, console, "list_journeys", map[string]any{}); len(asList(l["journeys"])) != 0 {
		t.Errorf("the console on its own lists %v", l)
	}

	for name, c := range map[string]struct {
		cs   *mcp.ClientSession
		who  any
		tool string
		want string
	}{
		"bob is no delegate":  {bob, "alice", "list_journeys", "may not act on behalf of another caller"},
		"not a name":          {console, "../alice", "list_journeys", "is not a caller a delegate may act for"},
		"not a string":        {console, 42, "list_journeys", "is not a caller a delegate may act for"},
		"a nested agent's":    {console, "alice/alices", "list_journeys", "is not a caller a delegate may act for"},
		"a delegate":          {console, "console", "list_journeys", "is not a caller a delegate may act for"},
		"spawning for alice":  {console, "alice", "spawn_worker", "a delegate may call only"},
		"an action for alice": {console, "alice", "execute_in_worker", "a delegate may call only"},
	} {
		args := map[string]map[string]any{
			"list_journeys":     {},
			"spawn_worker":      {"worker_id": "filesystem_write_v1", "journey_id": "for-alice"},
			"execute_in_worker": {"journey_id": "alices", "action": map[string]any{"type": "list", "target": "."}},
		}[c.tool]
		res, err := onBehalf(c.cs, c.who, c.tool, args)
		if err != nil || !res.IsError || !strings.Contains(meshapi.ResultText(res), c.want) {
			t.Errorf("%s: %v %+v, want an error saying %q", name, err, res, c.want)
			continue
		}
		if e, ok := meshapi.ErrorOf(res); !ok || e.Code != meshapi.CodeUnauthenticated {
			t.Errorf("%s: code %+v, want unauthenticated", name, e)
		}
	}
	if l := must(t, alice, "list_journeys", map[string]any{}); len(asList(l["journeys"])) != 1 {
		t.Errorf("after the refused calls alice has %v, want her one journey", l)
	}
}

// errorCode is the code of a tool error's structured content.
func errorCode(r result) string {
	e, _ := r.out["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}
