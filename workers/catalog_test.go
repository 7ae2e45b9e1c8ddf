package workers_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"go.yaml.in/yaml/v4"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/workers"
)

var update = flag.Bool("update", false, "rewrite worker.schema.json from the Go types")

// The first catalog has every worker the architecture lists, each loaded,
// validated and compiled into a gate.
func TestCatalog(t *testing.T) {
	t.Parallel()
	cat, err := workers.Load()
	if err != nil {
		t.Fatalf("the embedded catalog does not load:\n%v", err)
	}
	want := map[string]meshtype.Kind{
		"filesystem_research_v1":   meshtype.KindBuiltin,
		"filesystem_write_v1":      meshtype.KindBuiltin,
		"git_v1":                   meshtype.KindBuiltin,
		"shell_v1":                 meshtype.KindBuiltin,
		"claude_code_assistant_v1": meshtype.KindAgent,
		"codex_assistant_v1":       meshtype.KindAgent,
		"mcp_echo_v1":              meshtype.KindMCP,
	}
	var got []string
	for _, e := range cat.Entries() {
		got = append(got, e.Definition.ID)
		d := e.Definition
		if kind, ok := want[d.ID]; ok && d.Kind != kind {
			t.Errorf("%s: kind %s, want %s", d.ID, d.Kind, kind)
		}
		if d.Name == "" || d.Description == "" || d.Image == "" || len(d.Tools) == 0 || e.Gate == nil {
			t.Errorf("%s: incomplete: %+v", d.ID, d)
		}
		if d.Isolation.User == "" || d.Isolation.User == "0" || d.Isolation.Level != meshtype.IsolationContainer {
			t.Errorf("%s: isolation %+v", d.ID, d.Isolation)
		}
	}
	for id := range want {
		if !slices.Contains(got, id) {
			t.Errorf("catalog lacks %s; has %v", id, got)
		}
	}
}

// The catalog's policies do what their comments say.
func TestCatalogPolicies(t *testing.T) {
	t.Parallel()
	cat, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	type check struct {
		worker  string
		action  meshtype.Action
		state   meshtype.JourneyState
		refused []string
	}
	for _, c := range []check{
		{"filesystem_research_v1", meshtype.Action{Type: "read", Target: "README.md"}, meshtype.JourneyState{}, nil},
		{"filesystem_research_v1", meshtype.Action{Type: "write", Target: "notes.md", Content: "x"}, meshtype.JourneyState{}, []string{"tools", "readonly"}},
		{"filesystem_research_v1", meshtype.Action{Type: "read", Target: "config/.env"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"filesystem_research_v1", meshtype.Action{Type: "read", Target: "docs/secret-plan.md"}, meshtype.JourneyState{}, []string{"no_secrets_in_name"}},
		{"filesystem_write_v1", meshtype.Action{Type: "write", Target: "big.bin", Content: string(make([]byte, 2_000_000))}, meshtype.JourneyState{}, []string{"max_file_size"}},
		{"filesystem_write_v1", meshtype.Action{Type: "write", Target: "../escape", Content: "x"}, meshtype.JourneyState{}, []string{"path_safety"}},
		{"filesystem_write_v1", meshtype.Action{Type: "read", Target: "a"}, meshtype.JourneyState{ActionCount: 1000}, []string{"max_actions"}},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"go", "test", "./..."}}, meshtype.JourneyState{}, nil},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"cat", ".env"}}, meshtype.JourneyState{}, []string{"commands"}},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"curl", "http://example.com"}}, meshtype.JourneyState{}, []string{"commands", "no_network_tools"}},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"go", "test", "-exec", "sh", "./..."}}, meshtype.JourneyState{}, []string{"commands"}},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"go", "vet", "-vettool=/bin/sh", "./..."}}, meshtype.JourneyState{}, []string{"commands"}},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"git", "diff", "--no-index", ".env", "/dev/null"}}, meshtype.JourneyState{}, []string{"commands"}},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"git", "diff", "--stat", "HEAD~1", "--", "main.go"}}, meshtype.JourneyState{}, nil},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"go", "test", "-run", "TestX", "-count=1", "-v", "./pkg/..."}}, meshtype.JourneyState{}, nil},
		{"shell_v1", meshtype.Action{Type: "exec", Command: []string{"make", "test"}}, meshtype.JourneyState{}, []string{"commands"}},
		{"shell_v1", meshtype.Action{Type: "tool", Tool: "exec", Arguments: map[string]any{"command": []any{"sh", "-c", "cat .env"}}}, meshtype.JourneyState{}, []string{"tools"}},
		{"filesystem_research_v1", meshtype.Action{Type: "tool", Tool: "search", Arguments: map[string]any{"path": ".", "pattern": "."}}, meshtype.JourneyState{}, []string{"tools"}},
		{"git_v1", meshtype.Action{Type: "tool", Tool: "git_commit", Arguments: map[string]any{"message": "fix"}}, meshtype.JourneyState{}, nil},
		{"git_v1", meshtype.Action{Type: "tool", Tool: "git_commit", Arguments: map[string]any{}}, meshtype.JourneyState{}, []string{"commit_message_required"}},
		{"git_v1", meshtype.Action{Type: "tool", Tool: "git_push"}, meshtype.JourneyState{}, []string{"tools"}},
		{"git_v1", meshtype.Action{Type: "tool", Tool: "git_init"}, meshtype.JourneyState{}, nil},
		{"claude_code_assistant_v1", meshtype.Action{Type: "task", Task: "Summarise README.md"}, meshtype.JourneyState{CostUSD: 1.5}, nil},
		{"claude_code_assistant_v1", meshtype.Action{Type: "task", Task: "more"}, meshtype.JourneyState{CostUSD: 2.01}, []string{"max_cost_usd"}},
		{"mcp_echo_v1", meshtype.Action{Type: "tool", Tool: "echo", Arguments: map[string]any{"text": "hi"}}, meshtype.JourneyState{}, nil},
		{"mcp_echo_v1", meshtype.Action{Type: "tool", Tool: "shell", Arguments: map[string]any{"text": "hi"}}, meshtype.JourneyState{}, []string{"tools"}},
	} {
		e, ok := cat.Lookup(c.worker)
		if !ok {
			t.Fatalf("no %s", c.worker)
		}
		var got []string
		for _, v := range e.Gate.Evaluate(&c.action, c.state) {
			got = append(got, v.ConstraintID)
		}
		if !slices.Equal(got, c.refused) {
			t.Errorf("%s %+v: violations %v, want %v", c.worker, c.action.Type, got, c.refused)
		}
	}
}

// The catalog's workers that run long actions say so: a repository's tests
// and an agent's task need more than the marketplace's defaults. The agent
// workers that extend claude_code_assistant_v1 inherit its timeout.
func TestCatalogActionTimeouts(t *testing.T) {
	t.Parallel()
	cat, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	for worker, want := range map[string]time.Duration{
		"shell_v1":                 10 * time.Minute,
		"claude_code_assistant_v1": 30 * time.Minute,
		"claude_code_reviewer_v1":  30 * time.Minute,
		"codex_assistant_v1":       30 * time.Minute,
		"filesystem_write_v1":      0, // the defaults
	} {
		e, ok := cat.Lookup(worker)
		if !ok {
			t.Fatalf("no %s", worker)
		}
		if got := time.Duration(e.Definition.Constraints.ActionTimeout); got != want {
			t.Errorf("%s: action_timeout %s, want %s", worker, got, want)
		}
	}
}

// worker.schema.json is generated from the Go types; run
// `go test ./workers -run TestSchemaIsCurrent -update` (or `make schema`)
// after changing them.
func TestSchemaIsCurrent(t *testing.T) {
	t.Parallel()
	want, err := workerdef.Schema()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("worker.schema.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(workers.Schema(), want) {
		t.Error("worker.schema.json is stale: run `make schema` and commit the result")
	}
}

// Every catalog file validates against the committed schema, as an editor
// would check it, and the schema refuses what Load refuses structurally.
func TestCatalogFilesMatchSchema(t *testing.T) {
	t.Parallel()
	var s jsonschema.Schema
	if err := json.Unmarshal(workers.Schema(), &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := fs.Glob(workers.FS(), "*.yaml")
	for _, f := range files {
		data, _ := fs.ReadFile(workers.FS(), f)
		if err := rs.Validate(yamlToJSON(t, data)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, bad := range []string{
		"id: a_v1\ncolour: blue\n",
		"id: a_v1\nkind: robot\n",
		"id: a_v1\nconstraints: {max_file_size: lots}\n",
		"id: a_v1\nisolation: {idle_timeout: soon}\n",
		"id: Not_Versioned\n",
	} {
		if err := rs.Validate(yamlToJSON(t, []byte(bad))); err == nil {
			t.Errorf("schema accepted %q", bad)
		}
	}
}

func yamlToJSON(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	// Round-trip through JSON so numbers and maps have JSON's types.
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
