package gate_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// FuzzEvaluate feeds arbitrary actions and journey counters to a gate with
// built-ins and rules: it must never panic, always explain a refusal, and give
// the same decision for the same input.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []struct {
		typ, target, content, pattern, cmd0, tool string
		count                                     int64
		cost                                      float64
	}{
		{"read", "README.md", "", "", "", "", 0, 0},
		{"write", "../x", "hello", "", "", "", 1, 0.5},
		{"exec", "", "", "", "go", "", 0, 0},
		{"tool", "", "", "", "", "echo", 5, 3},
		{"search", "a/\u2024\u2024/b", "", "(?i)x", "", "", 0, 0},
		{"list", "app/.ENV", "", "", "", "", 10, 2},
		{"bogus", "\x00", "", "", "", "", -1, -1},
	} {
		f.Add(s.typ, s.target, s.content, s.pattern, s.cmd0, s.tool, s.count, s.cost)
	}
	g := mustCompile(f, ruleDef(sixRules...))
	f.Fuzz(func(t *testing.T, typ, target, content, pattern, cmd0, tool string, count int64, cost float64) {
		a := meshtype.Action{
			Type: meshtype.ActionType(typ), Target: target, Content: content, Pattern: pattern,
			Command: []string{cmd0, target}, Tool: tool, Arguments: map[string]any{"path": target, "n": cost},
		}
		state := meshtype.JourneyState{ActionCount: count, CostUSD: cost}
		first := g.Evaluate(&a, state)
		again := g.Evaluate(&a, state)
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("non-deterministic: %+v then %+v", first, again)
		}
		for _, v := range first {
			if !v.Violated || v.ConstraintID == "" || v.Message == "" {
				t.Fatalf("violation without id or message: %+v", v)
			}
		}
		if _, err := json.Marshal(first); err != nil {
			t.Fatalf("violations do not encode: %v", err)
		}
	})
}
