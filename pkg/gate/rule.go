package gate

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// RuleCostLimit caps the CEL cost of one rule evaluation; a rule that exceeds
// it is a violation. It bounds what a costly expression over a large action
// (a regex over a big content, a comprehension over many arguments) can take.
const RuleCostLimit = 1_000_000

// ruleEnv declares what rules may use: `action` (the action, fields named as in
// its JSON) and `journey` (action_count, cost_usd), plus the strings extension.
var ruleEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(
			reflect.TypeFor[meshtype.Action](),
			reflect.TypeFor[meshtype.JourneyState](),
			ext.ParseStructTag("json"),
		),
		cel.Variable("action", cel.ObjectType("meshtype.Action")),
		cel.Variable("journey", cel.ObjectType("meshtype.JourneyState")),
		ext.Strings(),
	)
})

// rule is one compiled user rule.
type rule struct {
	id      string
	message string
	prg     cel.Program
	msgPrg  cel.Program // from messageExpression; nil when absent
}

func compileRule(path string, r *meshtype.Rule) (*rule, error) {
	env, err := ruleEnv()
	if err != nil {
		return nil, fmt.Errorf("building the CEL environment: %w", err)
	}
	if strings.TrimSpace(r.Expression) == "" {
		return nil, &CompileError{Path: path + ".expression", Msg: "empty expression"}
	}
	prg, err := compileCEL(env, path+".expression", r.Expression, cel.BoolType)
	if err != nil {
		return nil, err
	}
	out := &rule{id: r.ID, message: r.Message, prg: prg}
	if out.message == "" {
		out.message = fmt.Sprintf("rule %s refused the action", r.ID)
	}
	if r.MessageExpression != "" {
		if out.msgPrg, err = compileCEL(env, path+".messageExpression", r.MessageExpression, cel.StringType); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func compileCEL(env *cel.Env, path, src string, want *cel.Type) (cel.Program, error) {
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, &CompileError{Path: path, Msg: "invalid CEL: " + oneLine(iss.Err().Error())}
	}
	if !ast.OutputType().IsExactType(want) {
		return nil, &CompileError{Path: path, Msg: fmt.Sprintf("CEL expression must evaluate to %s, not %s", want, ast.OutputType())}
	}
	prg, err := env.Program(ast, cel.CostLimit(RuleCostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, &CompileError{Path: path, Msg: "invalid CEL: " + oneLine(err.Error())}
	}
	return prg, nil
}

// oneLine folds CEL's multi-line error (message, source line, caret) into one
// line, keeping the message and dropping the picture.
func oneLine(s string) string {
	s = strings.TrimPrefix(s, "ERROR: ")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimPrefix(s, "<input>:")
}

// ruleInput is the activation rules run against; a struct rather than a map
// so evaluation allocates nothing for it.
type ruleInput struct {
	action  *meshtype.Action
	journey *meshtype.JourneyState
}

func (in *ruleInput) ResolveName(name string) (any, bool) {
	switch name {
	case "action":
		return in.action, true
	case "journey":
		return in.journey, true
	}
	return nil, false
}

func (in *ruleInput) Parent() interpreter.Activation { return nil }

// eval runs the rule; it fails closed: an error, a blown cost budget or a
// non-boolean result all refuse the action.
func (r *rule) eval(in *ruleInput) (string, bool) {
	out, _, err := r.prg.Eval(in)
	if err != nil {
		return fmt.Sprintf("rule %s could not be evaluated, so the action is refused: %v", r.id, err), false
	}
	if out == types.True {
		return "", true
	}
	if out.Type() != types.BoolType {
		return fmt.Sprintf("rule %s did not evaluate to a boolean, so the action is refused", r.id), false
	}
	if r.msgPrg != nil {
		if m, _, err := r.msgPrg.Eval(in); err == nil {
			if s, ok := m.Value().(string); ok && s != "" {
				return s, false
			}
		}
	}
	return r.message, false
}
