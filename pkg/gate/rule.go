package gate

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
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

// newRuleEnv makes a rule environment over the Go types rules read, with
// their fields named as in their JSON (the spelling definitions and the API
// use), the given variables and the strings extension: what action and
// result rules have in common.
func newRuleEnv(types []reflect.Type, variables ...cel.EnvOption) (*cel.Env, error) {
	native := make([]any, 0, len(types)+1)
	for _, t := range types {
		native = append(native, t)
	}
	native = append(native, ext.ParseStructTag("json"))
	opts := []cel.EnvOption{ext.NativeTypes(native...)}
	opts = append(opts, variables...)
	opts = append(opts, ext.Strings())
	return cel.NewEnv(opts...)
}

// ruleEnv declares what action rules may use: `action` (the action, fields
// named as in its JSON) and `journey` (action_count, cost_usd), plus the
// strings extension.
var ruleEnv = sync.OnceValues(func() (*cel.Env, error) {
	return newRuleEnv(
		[]reflect.Type{reflect.TypeFor[meshtype.Action](), reflect.TypeFor[meshtype.JourneyState]()},
		cel.Variable("action", cel.ObjectType("meshtype.Action")),
		cel.Variable("journey", cel.ObjectType("meshtype.JourneyState")),
	)
})

// resultRuleEnv declares what result rules may use: `result` (the change
// summary, fields named as in its JSON: result.files[0].old_path), plus the
// strings extension. It is a separate environment so that a result rule
// cannot name an action, and an action rule cannot name a result.
var resultRuleEnv = sync.OnceValues(func() (*cel.Env, error) {
	return newRuleEnv(
		[]reflect.Type{reflect.TypeFor[meshtype.ChangeSummary](), reflect.TypeFor[meshtype.ChangedFile]()},
		cel.Variable("result", cel.ObjectType("meshtype.ChangeSummary")),
	)
})

// ruleSet says how one list of rules in a definition is compiled.
type ruleSet struct {
	field    string                   // where the list is written: "constraints.rules"
	env      func() (*cel.Env, error) // what its expressions may use
	subject  string                   // what a refusal refuses, for messages: "action"
	reserved []string                 // ids its rules may not take
}

// A result rule may not take the action gate's built-in ids either: a result
// violation named "denied_paths" would read as the action gate's.
var (
	actionRules = ruleSet{field: "constraints.rules", env: ruleEnv, subject: "action", reserved: builtinIDs}
	resultRules = ruleSet{field: "result.rules", env: resultRuleEnv, subject: "change", reserved: slices.Concat(resultBuiltinIDs, builtinIDs)}
)

var ruleIDPattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// compile checks the rules' ids (valid, not reserved, unique in the list) and
// compiles each rule, failing with a *CompileError at the first problem.
func (s *ruleSet) compile(rules []meshtype.Rule) ([]*rule, error) {
	var out []*rule
	seen := map[string]bool{}
	for i := range rules {
		r := &rules[i]
		path := s.field + "[" + strconv.Itoa(i) + "]"
		switch {
		case !ruleIDPattern.MatchString(r.ID):
			return nil, &CompileError{Path: path + ".id", Msg: fmt.Sprintf("rule id %q must match %s", r.ID, ruleIDPattern)}
		case slices.Contains(s.reserved, r.ID):
			return nil, &CompileError{Path: path + ".id", Msg: fmt.Sprintf("rule id %q is a built-in constraint id", r.ID)}
		case seen[r.ID]:
			return nil, &CompileError{Path: path + ".id", Msg: fmt.Sprintf("rule id %q is used twice", r.ID)}
		}
		seen[r.ID] = true
		cr, err := s.compileRule(path, r)
		if err != nil {
			return nil, err
		}
		out = append(out, cr)
	}
	return out, nil
}

// rule is one compiled user rule.
type rule struct {
	id      string
	subject string // what a refusal refuses: "action" or "change"
	message string
	prg     cel.Program
	msgPrg  cel.Program // from messageExpression; nil when absent
}

func (s *ruleSet) compileRule(path string, r *meshtype.Rule) (*rule, error) {
	env, err := s.env()
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
	out := &rule{id: r.ID, subject: s.subject, message: r.Message, prg: prg}
	if out.message == "" {
		out.message = fmt.Sprintf("rule %s refused the %s", r.ID, s.subject)
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

// resultInput is the activation result rules run against.
type resultInput struct {
	result *meshtype.ChangeSummary
}

func (in *resultInput) ResolveName(name string) (any, bool) {
	if name == "result" {
		return in.result, true
	}
	return nil, false
}

func (in *resultInput) Parent() interpreter.Activation { return nil }

// eval runs the rule; it fails closed: an error, a blown cost budget or a
// non-boolean result all refuse the action (or the change).
func (r *rule) eval(in interpreter.Activation) (string, bool) {
	out, _, err := r.prg.Eval(in)
	if err != nil {
		return fmt.Sprintf("rule %s could not be evaluated, so the %s is refused: %v", r.id, r.subject, err), false
	}
	if out == types.True {
		return "", true
	}
	if out.Type() != types.BoolType {
		return fmt.Sprintf("rule %s did not evaluate to a boolean, so the %s is refused", r.id, r.subject), false
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
