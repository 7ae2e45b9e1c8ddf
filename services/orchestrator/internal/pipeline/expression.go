package pipeline

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/ext"
)

// CostLimit caps the CEL cost of one evaluation of a when or foreach
// expression; an expression that exceeds it fails the evaluation.
const CostLimit = 1_000_000

// MaxForeachItems is the most items a foreach may fan a node out to.
const MaxForeachItems = 1000

// exprEnv declares what when and foreach expressions may use: inputs, a
// map(string, dyn) of the run's inputs, and nodes, a map(string,
// NodeState) whose values have output, status, attempts and
// iteration; plus CEL's strings extension.
var exprEnv = sync.OnceValues(func() (*cel.Env, error) {
	// CEL names a native type by its Go package and name (api.NodeState).
	nodeState := reflect.TypeFor[NodeState]()
	return cel.NewEnv(
		ext.NativeTypes(nodeState, ext.ParseStructTag("json")),
		cel.Variable("inputs", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("nodes", cel.MapType(cel.StringType, cel.ObjectType(nodeState.String()))),
		ext.Strings(),
	)
})

// compileCEL compiles node i's when or foreach expression, type-checks its
// result (when: bool, foreach: a list) and checks that it names only
// declared inputs and the node's ancestors.
func (c *compiler) compileCEL(i int, field, src string) cel.Program {
	env, err := exprEnv()
	if err != nil {
		panic("pipeline: building the CEL environment: " + err.Error())
	}
	p, label := nodePath(i)+"."+field, c.label(i)
	if strings.TrimSpace(src) == "" {
		c.fail(p, "%s: %s: empty expression", label, field)
		return nil
	}
	checked, iss := env.Compile(src)
	if iss.Err() != nil {
		c.fail(p, "%s: %s: invalid CEL: %s", label, field, oneLine(iss.Err().Error()))
		return nil
	}
	out := checked.OutputType()
	switch {
	case field == "when" && out.Kind() != types.BoolKind && out.Kind() != types.DynKind:
		c.fail(p, "%s: when must evaluate to bool, not %s", label, out)
		return nil
	case field == "foreach" && out.Kind() != types.ListKind && out.Kind() != types.DynKind:
		c.fail(p, "%s: foreach must evaluate to a list, not %s", label, out)
		return nil
	}
	before := len(c.errs)
	c.checkCELReferences(i, p, field, checked.NativeRep())
	if len(c.errs) > before {
		return nil
	}
	prg, err := env.Program(checked, cel.CostLimit(CostLimit), cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		c.fail(p, "%s: %s: invalid CEL: %s", label, field, oneLine(err.Error()))
		return nil
	}
	return prg
}

// checkCELReferences refuses inputs.<name> of an undeclared input and
// nodes.<id> of a node that is not an ancestor of node i (has(nodes.<id>)
// may test any node). Dynamic references (nodes[k]) are left to run time.
func (c *compiler) checkCELReferences(i int, p, field string, a *ast.AST) {
	refs := a.ReferenceMap()
	variable := func(e ast.Expr) string {
		if e.Kind() != ast.IdentKind {
			return ""
		}
		if r, ok := refs[e.ID()]; ok && (r.Name == "inputs" || r.Name == "nodes") {
			return r.Name
		}
		return ""
	}
	label := c.label(i)
	check := func(root, name string, testOnly bool) {
		switch root {
		case "inputs":
			if _, ok := c.def.Inputs[name]; !ok {
				c.fail(p, "%s: %s: unknown input %q (%s)", label, field, name, c.inputList())
			}
		case "nodes":
			j, ok := c.index[name]
			switch {
			case !ok:
				c.fail(p, "%s: %s: unknown node %q", label, field, name)
			case !testOnly && c.ordered[i] && !c.isAncestor(j, i):
				c.fail(p, "%s: %s: nodes.%s: %q is not an ancestor of %q through needs, so its state may not exist yet",
					label, field, name, name, c.def.Nodes[i].ID)
			}
		}
	}
	ast.PreOrderVisit(a.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			s := e.AsSelect()
			if root := variable(s.Operand()); root != "" {
				check(root, s.FieldName(), s.IsTestOnly())
			}
		case ast.CallKind:
			call := e.AsCall()
			args := call.Args()
			if call.FunctionName() != operators.Index || len(args) != 2 || args[1].Kind() != ast.LiteralKind {
				return
			}
			if name, ok := args[1].AsLiteral().(types.String); ok {
				if root := variable(args[0]); root != "" {
					check(root, string(name), false)
				}
			}
		}
	}))
}

// oneLine folds CEL's multi-line error (message, source line, caret) into one
// line, keeping the message and its position in the expression.
func oneLine(s string) string {
	s = strings.TrimPrefix(s, "ERROR: ")
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimPrefix(s, "<input>:")
}

// activation is what expressions are evaluated against.
func activation(state State) map[string]any {
	inputs, nodes := state.Inputs, state.Nodes
	if inputs == nil {
		inputs = map[string]any{}
	}
	if nodes == nil {
		nodes = map[string]NodeState{}
	}
	return map[string]any{"inputs": inputs, "nodes": nodes}
}

// EvalWhen evaluates the when condition of node id against the run state; a
// node without one always runs. An error (a missing node state, a blown
// cost limit, a result that is not a bool) is returned as such: the caller
// decides whether it fails the node.
func (p *Pipeline) EvalWhen(id string, state State) (bool, error) {
	i, ok := p.index[id]
	if !ok {
		return false, fmt.Errorf("pipeline %s has no node %q", p.def.Name, id)
	}
	prg := p.nodes[i].when
	if prg == nil {
		return true, nil
	}
	out, _, err := prg.Eval(activation(state))
	if err != nil {
		return false, fmt.Errorf("evaluating the when of node %q: %w", id, err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("evaluating the when of node %q: got %s, want a bool", id, out.Type().TypeName())
	}
	return bool(b), nil
}

// ForeachItems evaluates the foreach of node id against the run state and
// returns its items: the elements of a CEL list (as Go values: string,
// int64, uint64, float64, bool, nil, []any, map[string]any, ...), or the
// non-empty lines, trimmed, of a rendered template. At most MaxForeachItems.
func (p *Pipeline) ForeachItems(id string, state State) ([]any, error) {
	i, ok := p.index[id]
	if !ok {
		return nil, fmt.Errorf("pipeline %s has no node %q", p.def.Name, id)
	}
	cn := &p.nodes[i]
	var items []any
	switch {
	case cn.foreachTmpl != nil:
		text, err := render(cn.foreachTmpl, templateData(state, nil))
		if err != nil {
			return nil, fmt.Errorf("rendering the foreach of node %q: %w", id, err)
		}
		for line := range strings.Lines(text) {
			if line = strings.TrimSpace(line); line != "" {
				items = append(items, line)
			}
		}
	case cn.foreachCEL != nil:
		out, _, err := cn.foreachCEL.Eval(activation(state))
		if err != nil {
			return nil, fmt.Errorf("evaluating the foreach of node %q: %w", id, err)
		}
		list, ok := out.(traits.Lister)
		if !ok {
			return nil, fmt.Errorf("evaluating the foreach of node %q: got %s, want a list", id, out.Type().TypeName())
		}
		v, err := nativeValue(list)
		if err != nil {
			return nil, fmt.Errorf("evaluating the foreach of node %q: %w", id, err)
		}
		items = v.([]any)
	default:
		return nil, fmt.Errorf("node %q has no foreach", id)
	}
	if len(items) > MaxForeachItems {
		return nil, fmt.Errorf("the foreach of node %q gave %d items, more than %d", id, len(items), MaxForeachItems)
	}
	if items == nil {
		items = []any{}
	}
	return items, nil
}

// nativeValue turns a CEL value into plain Go values: lists into []any and
// maps with string keys into map[string]any, recursively.
func nativeValue(v ref.Val) (any, error) {
	switch v := v.(type) {
	case types.Null:
		return nil, nil
	case traits.Lister:
		var out []any
		for it := v.Iterator(); it.HasNext() == types.True; {
			x, err := nativeValue(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	case traits.Mapper:
		out := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, errors.New("a map item has a key that is not a string")
			}
			x, err := nativeValue(v.Get(k))
			if err != nil {
				return nil, err
			}
			out[string(ks)] = x
		}
		return out, nil
	}
	return v.Value(), nil
}
