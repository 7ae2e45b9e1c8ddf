package pipeline

import (
	"fmt"
	"maps"
	"strings"
	"text/template"
	"text/template/parse"
)

// MaxRenderedSize is the largest text a template may render.
const MaxRenderedSize = 16 << 20

// scope says what a template may reference beyond .inputs and .nodes.
type scope struct {
	item   bool // .item and .index: the task of a foreach node
	result bool // .result: an output template
}

// compileTemplate parses node i's task, foreach or output template with
// missingkey=error, and walks its parse tree so that it references only
// declared inputs and the outputs of the node's ancestors (plus what its
// scope adds). A template that passes cannot fail at run time for a
// reference Load could have refused.
func (c *compiler) compileTemplate(i int, field, src string, sc scope) *template.Template {
	p, label := nodePath(i)+"."+field, c.label(i)
	t, err := template.New(field).Option("missingkey=error").Parse(src)
	if err != nil {
		c.fail(p, "%s: %s: invalid template: %s", label, field, templateError(field, err))
		return nil
	}
	if len(t.Templates()) > 1 {
		c.fail(p, "%s: %s: {{define}} and {{block}} are not supported in pipelines", label, field)
		return nil
	}
	if t.Tree == nil {
		return t
	}
	r := &refChecker{c: c, i: i, p: p, prefix: label + ": " + field + ": ", scope: sc}
	before := len(c.errs)
	r.walk(t.Root, true)
	if len(c.errs) > before {
		return nil
	}
	return t
}

// templateError turns "template: task:3: unexpected ..." into "line 3:
// unexpected ...".
func templateError(name string, err error) string {
	msg := strings.TrimPrefix(err.Error(), "template: "+name+":")
	if line, rest, ok := strings.Cut(msg, ": "); ok && line != "" && strings.Trim(line, "0123456789") == "" {
		return "line " + line + ": " + rest
	}
	return msg
}

// refChecker walks a template's parse tree, tracking whether dot is still
// the template's data (it is not inside range and with), and checks every
// reference to the data: fields of dot, $ and chains on them.
type refChecker struct {
	c      *compiler
	i      int
	p      string
	prefix string
	scope  scope
}

func (r *refChecker) fail(format string, args ...any) {
	r.c.fail(r.p, r.prefix+format, args...)
}

func (r *refChecker) walk(n parse.Node, rootDot bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, x := range n.Nodes {
			r.walk(x, rootDot)
		}
	case *parse.ActionNode:
		r.walk(n.Pipe, rootDot)
	case *parse.PipeNode:
		if n == nil {
			return
		}
		for _, cmd := range n.Cmds {
			r.walk(cmd, rootDot)
		}
	case *parse.CommandNode:
		for _, arg := range n.Args {
			r.walk(arg, rootDot)
		}
	case *parse.IfNode:
		r.branch(&n.BranchNode, rootDot, rootDot)
	case *parse.RangeNode:
		r.branch(&n.BranchNode, rootDot, false)
	case *parse.WithNode:
		r.branch(&n.BranchNode, rootDot, false)
	case *parse.TemplateNode:
		r.fail("{{template}} is not supported in pipelines")
	case *parse.ChainNode:
		if path, ok := r.rootPath(n.Node, rootDot); ok {
			r.ref(append(path, n.Field...), n.String())
			return
		}
		r.walk(n.Node, rootDot)
	default:
		if path, ok := r.rootPath(n, rootDot); ok {
			r.ref(path, n.String())
		}
	}
}

// branch walks if, range and with: the pipeline and the else branch see the
// outer dot, the body sees bodyDot.
func (r *refChecker) branch(b *parse.BranchNode, outerDot, bodyDot bool) {
	r.walk(b.Pipe, outerDot)
	r.walk(b.List, bodyDot)
	r.walk(b.ElseList, outerDot)
}

// rootPath returns the field path a node reads from the template's data, or
// false if it does not read from it.
func (r *refChecker) rootPath(n parse.Node, rootDot bool) ([]string, bool) {
	switch n := n.(type) {
	case *parse.DotNode:
		return nil, rootDot
	case *parse.FieldNode:
		return n.Ident, rootDot
	case *parse.VariableNode:
		if n.Ident[0] == "$" {
			return n.Ident[1:], true
		}
	case *parse.PipeNode:
		if len(n.Decl) == 0 && len(n.Cmds) == 1 && len(n.Cmds[0].Args) == 1 {
			return r.rootPath(n.Cmds[0].Args[0], rootDot)
		}
	}
	return nil, false
}

// ref checks one reference to the data, written as text.
func (r *refChecker) ref(path []string, text string) {
	c := r.c
	if len(path) == 0 {
		r.fail("%s: use .inputs.<name> or .nodes.<id>.output, not the whole data", text)
		return
	}
	switch path[0] {
	case "inputs":
		if len(path) == 1 {
			r.fail("%s: name one input, as .inputs.<name>", text)
			return
		}
		in, ok := c.def.Inputs[path[1]]
		switch {
		case !ok:
			r.fail("%s: unknown input %q (%s)", text, path[1], c.inputList())
		case len(path) > 2 && in.Type != TypeObject:
			r.fail("%s: input %q is a %s, which has no fields", text, path[1], in.Type)
		}
	case "nodes":
		if len(path) == 1 {
			r.fail("%s: name one node's output, as .nodes.<id>.output", text)
			return
		}
		j, ok := c.index[path[1]]
		switch {
		case !ok:
			r.fail("%s: unknown node %q", text, path[1])
		case len(path) != 3 || path[2] != "output" && path[2] != "patch":
			r.fail("%s: only a node's output or patch can be used, as .nodes.%s.output or .nodes.%s.patch", text, path[1], path[1])
		case c.ordered[r.i] && !c.isAncestor(j, r.i):
			r.fail("%s: %q is not an ancestor of %q through needs, so its output may not exist yet", text, path[1], c.def.Nodes[r.i].ID)
		}
	case "item", "index":
		switch {
		case !r.scope.item:
			r.fail("%s: only the task of a foreach node has .item and .index", text)
		case path[0] == "index" && len(path) > 1:
			r.fail("%s: .index is a number, which has no fields", text)
		}
	case "result":
		switch {
		case !r.scope.result:
			r.fail("%s: only an output template has .result", text)
		case len(path) > 1:
			r.fail("%s: .result is a string, which has no fields", text)
		}
	default:
		r.fail("%s: unknown field %q: templates use .inputs.<name> and .nodes.<id>.output%s", text, path[0], r.scopeHint())
	}
}

func (r *refChecker) scopeHint() string {
	switch {
	case r.scope.item:
		return ", and .item and .index in a foreach task"
	case r.scope.result:
		return ", and .result in an output template"
	}
	return ""
}

// templateData is what templates are executed with: .inputs, and
// .nodes.<id>.output and .patch of every node in the state (readable: its
// binary hunks are not shown).
func templateData(state State, extra map[string]any) map[string]any {
	inputs := state.Inputs
	if inputs == nil {
		inputs = map[string]any{}
	}
	nodes := make(map[string]any, len(state.Nodes))
	for id, ns := range state.Nodes {
		nodes[id] = map[string]any{"output": ns.Output, "patch": readablePatch(ns.Patch)}
	}
	data := map[string]any{"inputs": inputs, "nodes": nodes}
	maps.Copy(data, extra)
	return data
}

// binaryHunk starts a binary file's content in a git patch; the content
// follows in one or two fragments ("literal N" or "delta N", base85 lines,
// a blank line).
const binaryHunk = "GIT binary patch\n"

// readablePatch is a patch as a task shows it: each binary file's content
// (base85 an agent cannot read, up to megabytes of it) replaced by a line
// that says it is binary. A text hunk's lines all start with ' ', '+' or
// '-', so none is taken for one.
func readablePatch(patch string) string {
	if !strings.Contains(patch, "\n"+binaryHunk) {
		return patch
	}
	var b strings.Builder
	lines := strings.SplitAfter(patch, "\n")
	for i := 0; i < len(lines); i++ {
		if lines[i] != binaryHunk {
			b.WriteString(lines[i])
			continue
		}
		b.WriteString("(binary content, not shown)\n")
		for frag := 0; frag < 2 && i+1 < len(lines) && (strings.HasPrefix(lines[i+1], "literal ") || strings.HasPrefix(lines[i+1], "delta ")); frag++ {
			for i++; i+1 < len(lines) && lines[i] != "\n"; i++ {
			}
		}
	}
	return b.String()
}

// ErrTooLarge is returned, wrapped, by the Render methods for a text larger
// than MaxRenderedSize.
var ErrTooLarge = fmt.Errorf("the rendered text is larger than %d bytes", MaxRenderedSize)

// limitedBuilder is a strings.Builder that refuses to grow past
// MaxRenderedSize.
type limitedBuilder struct{ strings.Builder }

func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > MaxRenderedSize {
		return 0, ErrTooLarge
	}
	return b.Builder.Write(p)
}

func render(t *template.Template, data map[string]any) (string, error) {
	var b limitedBuilder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// RenderTask renders the task of agent node id against the run state. A
// missing key (the output of a node that has not run, a missing input) is an
// error, never "<no value>". Foreach nodes render each item with
// [Pipeline.RenderItemTask].
func (p *Pipeline) RenderTask(id string, state State) (string, error) {
	return p.renderTask(id, state, nil)
}

// RenderItemTask renders the task of foreach node id for one item, given to
// the template as .item, and its position in the items, as .index.
func (p *Pipeline) RenderItemTask(id string, state State, index int, item any) (string, error) {
	return p.renderTask(id, state, map[string]any{"item": item, "index": index})
}

func (p *Pipeline) renderTask(id string, state State, item map[string]any) (string, error) {
	i, ok := p.index[id]
	if !ok {
		return "", fmt.Errorf("pipeline %s has no node %q", p.def.Name, id)
	}
	n, cn := &p.def.Nodes[i], &p.nodes[i]
	switch {
	case cn.task == nil:
		return "", fmt.Errorf("node %q is an approval node: it has no task", id)
	case n.IsForeach() && item == nil:
		return "", fmt.Errorf("node %q has a foreach: render each item's task with RenderItemTask", id)
	case !n.IsForeach() && item != nil:
		return "", fmt.Errorf("node %q has no foreach, so its task has no item", id)
	}
	text, err := render(cn.task, templateData(state, item))
	if err != nil {
		return "", fmt.Errorf("rendering the task of node %q: %w", id, err)
	}
	return text, nil
}

// RenderOutput renders the output template of node id against the run state,
// with the node's raw result as .result. A node without an output template
// returns result unchanged.
func (p *Pipeline) RenderOutput(id string, state State, result string) (string, error) {
	i, ok := p.index[id]
	if !ok {
		return "", fmt.Errorf("pipeline %s has no node %q", p.def.Name, id)
	}
	t := p.nodes[i].output
	if t == nil {
		return result, nil
	}
	text, err := render(t, templateData(state, map[string]any{"result": result}))
	if err != nil {
		return "", fmt.Errorf("rendering the output of node %q: %w", id, err)
	}
	return text, nil
}
