package gate_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// writerDef is a read/write worker shaped like filesystem_write_v1.
func writerDef() *meshtype.Definition {
	return &meshtype.Definition{
		ID:    "writer_v1",
		Kind:  meshtype.KindBuiltin,
		Tools: []string{"read", "write", "list", "search", "delete", "exec"},
		Constraints: meshtype.Constraints{
			MaxFileSize:  1_000_000,
			AllowedPaths: []string{"**"},
			DeniedPaths:  []string{"**/.env", ".git/**", "secrets"},
			Commands:     []string{"go test", "git diff"},
			MaxActions:   10,
			MaxCostUSD:   2,
		},
	}
}

func mustCompile(tb testing.TB, def *meshtype.Definition) *gate.Gate {
	tb.Helper()
	g, err := gate.Compile(def)
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return g
}

// wantCompileError checks that Compile refuses def with a *CompileError at
// wantPath whose message contains wantMsg: the path is what points a
// definition's author at the field to fix.
func wantCompileError(t *testing.T, def *meshtype.Definition, wantPath, wantMsg string) {
	t.Helper()
	_, err := gate.Compile(def)
	var ce *gate.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *CompileError", err)
	}
	if ce.Path != wantPath || !strings.Contains(ce.Msg, wantMsg) {
		t.Errorf("got %q: %q, want %q containing %q", ce.Path, ce.Msg, wantPath, wantMsg)
	}
}

func ids(vs []meshtype.Violation) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.ConstraintID)
	}
	return out
}

// The seed examples of the contract hold exactly.
func TestSeedExamples(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, writerDef())

	big := &meshtype.Action{Type: meshtype.ActionWrite, Target: "big.bin", Content: strings.Repeat("x", 2_000_000)}
	got := g.Evaluate(big, meshtype.JourneyState{})
	want := []meshtype.Violation{{ConstraintID: "max_file_size", Violated: true, Message: "File size 2000000 bytes exceeds limit 1000000 bytes"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("2 MB write: got %+v, want %+v", got, want)
	}

	readme := &meshtype.Action{Type: meshtype.ActionRead, Target: "README.md"}
	if vs := g.Evaluate(readme, meshtype.JourneyState{}); vs != nil {
		t.Errorf("read README.md: got %+v, want no violations", vs)
	}
}

// Evaluate reports every violated constraint, not only the first.
func TestEvaluateReportsEveryViolation(t *testing.T) {
	t.Parallel()
	def := writerDef()
	def.Tools = []string{"read"}
	def.Constraints.Readonly = true
	g := mustCompile(t, def)
	a := &meshtype.Action{Type: meshtype.ActionWrite, Target: ".git/config", Content: strings.Repeat("x", 1_000_001)}
	got := ids(g.Evaluate(a, meshtype.JourneyState{ActionCount: 10, CostUSD: 2.5}))
	want := []string{"tools", "readonly", "denied_paths", "max_file_size", "max_actions", "max_cost_usd"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestBuiltins(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, writerDef())
	tests := []struct {
		name  string
		a     meshtype.Action
		state meshtype.JourneyState
		want  []string // constraint ids, in order
	}{
		{"read ok", meshtype.Action{Type: "read", Target: "src/main.go"}, meshtype.JourneyState{}, nil},
		{"write at limit", meshtype.Action{Type: "write", Target: "a.txt", Content: strings.Repeat("x", 1_000_000)}, meshtype.JourneyState{}, nil},
		{"write over limit", meshtype.Action{Type: "write", Target: "a.txt", Content: strings.Repeat("x", 1_000_001)}, meshtype.JourneyState{}, []string{"max_file_size"}},
		{"task not a tool", meshtype.Action{Type: "task", Task: "do it"}, meshtype.JourneyState{}, []string{"tools"}},
		{"tool not listed", meshtype.Action{Type: "tool", Tool: "git_commit"}, meshtype.JourneyState{}, []string{"tools"}},
		{"list root", meshtype.Action{Type: "list"}, meshtype.JourneyState{}, nil},
		{"list dot", meshtype.Action{Type: "list", Target: "."}, meshtype.JourneyState{}, nil},
		{"search subdir", meshtype.Action{Type: "search", Target: "pkg/", Pattern: "func"}, meshtype.JourneyState{}, nil},
		{"denied env", meshtype.Action{Type: "read", Target: "app/.env"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"denied env at root", meshtype.Action{Type: "read", Target: ".env"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"denied env upper case", meshtype.Action{Type: "read", Target: "app/.ENV"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"denied git dir itself", meshtype.Action{Type: "list", Target: ".git"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"denied git object", meshtype.Action{Type: "read", Target: ".git/objects/ab/cdef"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"denied dir covers children", meshtype.Action{Type: "read", Target: "secrets/key.txt"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"denied via dot segments", meshtype.Action{Type: "read", Target: "./app/./.env"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"denied via double slash", meshtype.Action{Type: "read", Target: "app//.env"}, meshtype.JourneyState{}, []string{"denied_paths"}},
		{"not denied lookalike name", meshtype.Action{Type: "read", Target: "app/.envrc"}, meshtype.JourneyState{}, nil},
		{"exec allowed prefix", meshtype.Action{Type: "exec", Command: []string{"go", "test", "./..."}}, meshtype.JourneyState{}, nil},
		{"exec exact allowed", meshtype.Action{Type: "exec", Command: []string{"git", "diff"}}, meshtype.JourneyState{}, nil},
		{"exec other", meshtype.Action{Type: "exec", Command: []string{"rm", "-rf", "/"}}, meshtype.JourneyState{}, []string{"commands"}},
		{"exec shell string", meshtype.Action{Type: "exec", Command: []string{"go test ./..."}}, meshtype.JourneyState{}, []string{"commands"}},
		{"exec prefix of prefix", meshtype.Action{Type: "exec", Command: []string{"go"}}, meshtype.JourneyState{}, []string{"commands"}},
		{"exec sibling subcommand", meshtype.Action{Type: "exec", Command: []string{"go", "run", "x.go"}}, meshtype.JourneyState{}, []string{"commands"}},
		{"exec NUL", meshtype.Action{Type: "exec", Command: []string{"go", "test\x00", "x"}}, meshtype.JourneyState{}, []string{"commands"}},
		{"exec empty", meshtype.Action{Type: "exec"}, meshtype.JourneyState{}, []string{"commands"}},
		{"actions below limit", meshtype.Action{Type: "read", Target: "a"}, meshtype.JourneyState{ActionCount: 9}, nil},
		{"actions at limit", meshtype.Action{Type: "read", Target: "a"}, meshtype.JourneyState{ActionCount: 10}, []string{"max_actions"}},
		{"cost below budget", meshtype.Action{Type: "read", Target: "a"}, meshtype.JourneyState{CostUSD: 1.99}, nil},
		{"cost at budget", meshtype.Action{Type: "read", Target: "a"}, meshtype.JourneyState{CostUSD: 2}, []string{"max_cost_usd"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := g.Evaluate(&tt.a, tt.state)
			if !reflect.DeepEqual(nonNil(ids(got)), nonNil(tt.want)) {
				t.Errorf("got %+v, want ids %v", got, tt.want)
			}
			for _, v := range got {
				if !v.Violated || v.Message == "" {
					t.Errorf("violation %+v: want violated with a message", v)
				}
			}
		})
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func TestReadonlyAndAllowedPaths(t *testing.T) {
	t.Parallel()
	def := writerDef()
	def.Constraints.Readonly = true
	def.Constraints.AllowedPaths = []string{"docs/**", "README.md"}
	g := mustCompile(t, def)
	for _, tt := range []struct {
		a    meshtype.Action
		want []string
	}{
		{meshtype.Action{Type: "read", Target: "README.md"}, nil},
		{meshtype.Action{Type: "read", Target: "docs/a/b.md"}, nil},
		{meshtype.Action{Type: "list", Target: "docs"}, nil},
		{meshtype.Action{Type: "read", Target: "src/main.go"}, []string{"allowed_paths"}},
		{meshtype.Action{Type: "read", Target: "README.md.bak"}, []string{"allowed_paths"}},
		{meshtype.Action{Type: "write", Target: "docs/new.md", Content: "x"}, []string{"readonly"}},
		{meshtype.Action{Type: "delete", Target: "README.md"}, []string{"readonly"}},
	} {
		if got := ids(g.Evaluate(&tt.a, meshtype.JourneyState{})); !reflect.DeepEqual(got, nonNil(tt.want)) {
			t.Errorf("%+v: got %v, want %v", tt.a, got, tt.want)
		}
	}
	if !g.PathDenied("src/main.go") || !g.PathDenied("docs/.env") || g.PathDenied("docs/x.md") {
		t.Error("PathDenied disagrees with the allowed and denied globs")
	}
}

func TestToolActionsCheckToolName(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, &meshtype.Definition{ID: "mcp_v1", Kind: meshtype.KindMCP, Tools: []string{"echo"}})
	if vs := g.Evaluate(&meshtype.Action{Type: "tool", Tool: "echo"}, meshtype.JourneyState{}); vs != nil {
		t.Errorf("echo: %+v", vs)
	}
	for _, a := range []meshtype.Action{{Type: "tool", Tool: "rm"}, {Type: "tool"}, {Type: "tool", Tool: "Echo"}} {
		if got := ids(g.Evaluate(&a, meshtype.JourneyState{})); !reflect.DeepEqual(got, []string{"tools"}) {
			t.Errorf("%+v: got %v, want [tools]", a, got)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	rule := func(id, expr string) meshtype.Constraints {
		return meshtype.Constraints{Rules: []meshtype.Rule{{ID: id, Expression: expr}}}
	}
	tests := []struct {
		name     string
		c        meshtype.Constraints
		wantPath string
		wantMsg  string
	}{
		{"syntax", rule("r", "action.target ==="), "constraints.rules[0].expression", "invalid CEL"},
		{"unknown field", rule("r", "action.tagret == 'x'"), "constraints.rules[0].expression", "undefined field 'tagret'"},
		{"unknown variable", rule("r", "request.user == 'x'"), "constraints.rules[0].expression", "undeclared reference"},
		{"not bool", rule("r", "action.target"), "constraints.rules[0].expression", "must evaluate to bool"},
		{"empty", rule("r", "  "), "constraints.rules[0].expression", "empty expression"},
		{"bad id", rule("Bad-Id", "true"), "constraints.rules[0].id", "must match"},
		{"builtin id", rule("readonly", "true"), "constraints.rules[0].id", "built-in"},
		{"duplicate id", meshtype.Constraints{Rules: []meshtype.Rule{{ID: "a", Expression: "true"}, {ID: "a", Expression: "true"}}}, "constraints.rules[1].id", "used twice"},
		{"message expression not string", meshtype.Constraints{Rules: []meshtype.Rule{{ID: "a", Expression: "true", MessageExpression: "1"}}}, "constraints.rules[0].messageExpression", "must evaluate to string"},
		{"bad glob", meshtype.Constraints{DeniedPaths: []string{"a/[b"}}, "constraints.denied_paths[0]", "invalid glob"},
		{"absolute glob", meshtype.Constraints{AllowedPaths: []string{"/etc/**"}}, "constraints.allowed_paths[0]", "invalid glob"},
		{"empty command", meshtype.Constraints{Commands: []string{"go test", "  "}}, "constraints.commands[1]", "empty command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantCompileError(t, &meshtype.Definition{ID: "x_v1", Tools: []string{"read"}, Constraints: tt.c}, tt.wantPath, tt.wantMsg)
		})
	}
}

// On builtin workers a tool action cannot reach meshworker's file tools
// around the checks of the typed actions, and the git tools' path arguments
// are checked like targets.
func TestBuiltinToolActionsAreChecked(t *testing.T) {
	t.Parallel()
	def := writerDef()
	def.Kind = meshtype.KindBuiltin
	def.Tools = append(def.Tools, "git_add", "git_diff", "git_status")
	g := mustCompile(t, def)
	for _, tc := range []struct {
		a    meshtype.Action
		want []string
	}{
		{meshtype.Action{Type: "tool", Tool: "read", Arguments: map[string]any{"path": ".env"}}, []string{"tools"}},
		{meshtype.Action{Type: "tool", Tool: "exec", Arguments: map[string]any{"command": []any{"sh", "-c", "cat .env"}}}, []string{"tools"}},
		{meshtype.Action{Type: "tool", Tool: "write", Arguments: map[string]any{"path": ".git/hooks/pre-commit"}}, []string{"tools"}},
		{meshtype.Action{Type: "tool", Tool: "git_add", Arguments: map[string]any{"paths": []any{"ok.go", "app/.env"}}}, []string{"denied_paths"}},
		{meshtype.Action{Type: "tool", Tool: "git_add", Arguments: map[string]any{"paths": []any{"../x"}}}, []string{"path_safety"}},
		{meshtype.Action{Type: "tool", Tool: "git_add", Arguments: map[string]any{"paths": "app/.env"}}, []string{"denied_paths"}},
		{meshtype.Action{Type: "tool", Tool: "git_add", Arguments: map[string]any{"paths": 42.0}}, []string{"path_safety"}},
		{meshtype.Action{Type: "tool", Tool: "git_diff", Arguments: map[string]any{"path": ".git/config"}}, []string{"denied_paths"}},
		{meshtype.Action{Type: "tool", Tool: "git_add", Arguments: map[string]any{"paths": []any{"main.go"}}}, nil},
		{meshtype.Action{Type: "tool", Tool: "git_status"}, nil},
	} {
		if got := ids(g.Evaluate(&tc.a, meshtype.JourneyState{})); !reflect.DeepEqual(got, nonNil(tc.want)) {
			t.Errorf("%s %v: got %v, want %v", tc.a.Tool, tc.a.Arguments, got, tc.want)
		}
	}
	// An MCP server may have a tool named like an action type: its own.
	mcpGate := mustCompile(t, &meshtype.Definition{ID: "m_v1", Kind: meshtype.KindMCP, Tools: []string{"read"}})
	if vs := mcpGate.Evaluate(&meshtype.Action{Type: "tool", Tool: "read"}, meshtype.JourneyState{}); vs != nil {
		t.Errorf("mcp worker's own read tool: %+v", vs)
	}
}
