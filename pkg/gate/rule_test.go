package gate_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// sixRules covers the rule shapes the benchmark uses: membership, bool, size,
// startsWith, exists() and a regex.
var sixRules = []meshtype.Rule{
	{ID: "type_member", Expression: "action.type in ['read', 'write', 'list', 'search', 'exec']", Message: "type not allowed"},
	{ID: "budget_left", Expression: "journey.cost_usd < 5.0 && journey.action_count < 100000", Message: "over budget"},
	{ID: "content_size", Expression: "size(action.content) <= 65536", Message: "content too large"},
	{ID: "no_tmp", Expression: "!action.target.startsWith('tmp/')", Message: "tmp is off limits"},
	{ID: "no_rm", Expression: "!action.command.exists(a, a == 'rm')", Message: "rm is refused"},
	{ID: "no_secret", Expression: "!action.target.matches('(?i)secret')", MessageExpression: "'target ' + action.target + ' looks like a secret'"},
}

func ruleDef(rules ...meshtype.Rule) *meshtype.Definition {
	def := writerDef()
	def.Tools = append(def.Tools, "task", "tool")
	def.Constraints.Rules = rules
	def.Constraints.MaxActions, def.Constraints.MaxCostUSD = 0, 0 // only the rules judge the journey here
	return def
}

func TestRules(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, ruleDef(sixRules...))
	tests := []struct {
		name  string
		a     meshtype.Action
		state meshtype.JourneyState
		want  []meshtype.Violation
	}{
		{"all pass", meshtype.Action{Type: "read", Target: "README.md"}, meshtype.JourneyState{}, nil},
		{"membership", meshtype.Action{Type: "delete", Target: "a"}, meshtype.JourneyState{}, []meshtype.Violation{{ConstraintID: "type_member", Violated: true, Message: "type not allowed"}}},
		{"bool over journey", meshtype.Action{Type: "read", Target: "a"}, meshtype.JourneyState{CostUSD: 1.5, ActionCount: 100000}, []meshtype.Violation{{ConstraintID: "budget_left", Violated: true, Message: "over budget"}}},
		{"size", meshtype.Action{Type: "write", Target: "a", Content: strings.Repeat("y", 65537)}, meshtype.JourneyState{}, []meshtype.Violation{{ConstraintID: "content_size", Violated: true, Message: "content too large"}}},
		{"startsWith", meshtype.Action{Type: "read", Target: "tmp/x"}, meshtype.JourneyState{}, []meshtype.Violation{{ConstraintID: "no_tmp", Violated: true, Message: "tmp is off limits"}}},
		{"exists", meshtype.Action{Type: "exec", Command: []string{"go", "test", "rm"}}, meshtype.JourneyState{}, []meshtype.Violation{{ConstraintID: "no_rm", Violated: true, Message: "rm is refused"}}},
		{"regex with messageExpression", meshtype.Action{Type: "read", Target: "my_SECRET.txt"}, meshtype.JourneyState{}, []meshtype.Violation{{ConstraintID: "no_secret", Violated: true, Message: "target my_SECRET.txt looks like a secret"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := g.Evaluate(&tt.a, tt.state); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// Rules see tool arguments, and a rule that fails at run time (a missing key)
// refuses the action instead of letting it through.
func TestRulesFailClosed(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, ruleDef(meshtype.Rule{ID: "path_arg", Expression: "action.arguments.path.startsWith('docs/')", Message: "docs only"}))
	ok := meshtype.Action{Type: "tool", Tool: "x", Arguments: map[string]any{"path": "docs/a"}}
	if vs := mustCompile(t, func() *meshtype.Definition {
		d := ruleDef(meshtype.Rule{ID: "path_arg", Expression: "action.arguments.path.startsWith('docs/')"})
		d.Tools = append(d.Tools, "x")
		return d
	}()).Evaluate(&ok, meshtype.JourneyState{}); vs != nil {
		t.Errorf("docs path: %+v", vs)
	}
	for _, a := range []meshtype.Action{
		{Type: "tool", Tool: "x", Arguments: map[string]any{"path": "src/a"}},
		{Type: "tool", Tool: "x", Arguments: map[string]any{"other": 1}},   // no such key
		{Type: "tool", Tool: "x", Arguments: map[string]any{"path": 42.0}}, // wrong type
		{Type: "tool", Tool: "x"}, // no arguments at all
	} {
		vs := g.Evaluate(&a, meshtype.JourneyState{})
		found := false
		for _, v := range vs {
			found = found || v.ConstraintID == "path_arg"
		}
		if !found {
			t.Errorf("%+v: got %+v, want a path_arg violation", a.Arguments, vs)
		}
	}
}

// A rule that would run too long is stopped by the cost limit and refuses.
func TestRuleCostLimit(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, ruleDef(meshtype.Rule{
		ID:         "quadratic",
		Expression: "action.command.all(x, action.command.all(y, size(x) + size(y) >= 0))",
	}))
	small := meshtype.Action{Type: "exec", Command: []string{"go", "test"}}
	if vs := g.Evaluate(&small, meshtype.JourneyState{}); vs != nil {
		t.Errorf("small command: %+v", vs)
	}
	big := meshtype.Action{Type: "exec", Command: append([]string{"go", "test"}, make([]string, 1000)...)}
	vs := g.Evaluate(&big, meshtype.JourneyState{})
	if len(vs) != 1 || vs[0].ConstraintID != "quadratic" || !strings.Contains(vs[0].Message, "could not be evaluated") {
		t.Errorf("big command: got %+v, want the rule to fail closed", vs)
	}
}

func TestEvaluateIsDeterministic(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, ruleDef(sixRules...))
	a := meshtype.Action{Type: "write", Target: "tmp/secret", Content: strings.Repeat("z", 2_000_000)}
	first := g.Evaluate(&a, meshtype.JourneyState{ActionCount: 11, CostUSD: 9})
	for range 20 {
		if got := g.Evaluate(&a, meshtype.JourneyState{ActionCount: 11, CostUSD: 9}); !reflect.DeepEqual(got, first) {
			t.Fatalf("got %+v, then %+v", first, got)
		}
	}
	if len(first) < 5 {
		t.Errorf("want many violations, got %+v", first)
	}
}

var _ = gate.RuleCostLimit
