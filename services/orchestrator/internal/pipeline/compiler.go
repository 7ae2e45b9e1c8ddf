package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// MaxNodes is the most nodes a pipeline may have.
const MaxNodes = 1000

var (
	namePattern   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	workerPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*_v[0-9]+$`)
)

// celReserved are words CEL does not accept as field names, so neither
// nodes.<id> nor inputs.<name> could name them.
var celReserved = []string{
	"as", "break", "const", "continue", "else", "false", "for", "function", "if", "import", "in",
	"let", "loop", "package", "namespace", "null", "return", "true", "var", "void",
}

// compiler validates one decoded definition and compiles it into a Pipeline,
// collecting every problem with the position of the value it is about.
type compiler struct {
	fsys fs.FS
	file string
	pos  map[string]*yaml.Node // field path -> value node, from the decoder
	def  *Definition
	errs Errors

	index     map[string]int // valid, unique node id -> index
	valid     []bool         // node i has a valid, unique id
	ordered   []bool         // node i is in the needs DAG (not in or after a cycle)
	ancestors [][]uint64     // bit set of node i's ancestors through needs; set when ordered
	order     []int
	nodes     []compiledNode
}

// at returns the node written at path, or at the closest enclosing value
// that was written; the root is always there.
func (c *compiler) at(p string) *yaml.Node {
	for {
		if n, ok := c.pos[p]; ok {
			return n
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return c.pos[""]
		}
		p = p[:i]
	}
}

func (c *compiler) failNode(n *yaml.Node, format string, args ...any) {
	c.errs = append(c.errs, &Error{File: c.file, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
}

func (c *compiler) fail(p, format string, args ...any) {
	c.failNode(c.at(p), format, args...)
}

// failKey reports a problem with a key of the mapping at p, at the key.
func (c *compiler) failKey(p, key, format string, args ...any) {
	if m := c.pos[p]; m != nil && m.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				c.failNode(m.Content[i], format, args...)
				return
			}
		}
	}
	c.fail(p+"."+key, format, args...)
}

func (c *compiler) compile() *Pipeline {
	d := c.def
	if d.Name == "" {
		c.fail("name", "missing name: every pipeline needs a name such as %q", "research_pipeline")
	} else if !namePattern.MatchString(d.Name) {
		c.fail("name", "name %q must match %s", d.Name, namePattern)
	}
	c.checkInputs()
	c.checkRoles()
	c.checkNodes()
	if len(c.errs) > 0 {
		return nil
	}
	p := &Pipeline{def: *d, file: c.file, index: c.index, nodes: c.nodes}
	n := c.at("name")
	p.namePos = position{n.Line, n.Column}
	for _, i := range c.order {
		p.order = append(p.order, d.Nodes[i].ID)
	}
	for i := range d.Nodes {
		if len(d.Nodes[i].Needs) == 0 {
			p.roots = append(p.roots, d.Nodes[i].ID)
		}
	}
	p.hash = hashDefinition(&p.def)
	return p
}

func (c *compiler) checkInputs() {
	for _, name := range slices.Sorted(maps.Keys(c.def.Inputs)) {
		in := c.def.Inputs[name]
		p := "inputs." + name
		switch {
		case !namePattern.MatchString(name):
			c.failKey("inputs", name, "input name %q must match %s", name, namePattern)
		case slices.Contains(celReserved, name):
			c.failKey("inputs", name, "input name %q is a reserved word of CEL", name)
		}
		switch {
		case in.Type == "":
			c.fail(p, "input %q: missing type: string, number, boolean, object or repository", name)
			continue
		case !slices.Contains(inputTypes, in.Type):
			c.fail(p+".type", "input %q: type %q is not one of string, number, boolean, object, repository", name, in.Type)
			continue
		case in.Type == TypeRepository && !in.Required:
			c.fail(p, "input %q: a repository input must be required (a workspace seeded from nothing needs no source)", name)
			continue
		}
		if in.Default == nil {
			continue
		}
		if in.Required {
			c.fail(p+".default", "input %q: a required input takes no default", name)
			continue
		}
		v, problem := checkValue(in.Type, in.Default)
		if problem != "" {
			c.fail(p+".default", "input %q: default: %s", name, problem)
			continue
		}
		in.Default = v
		c.def.Inputs[name] = in
	}
}

func (c *compiler) checkRoles() {
	for _, name := range slices.Sorted(maps.Keys(c.def.Roles)) {
		r := c.def.Roles[name]
		p := "roles." + name
		if !namePattern.MatchString(name) {
			c.failKey("roles", name, "role name %q must match %s", name, namePattern)
		}
		switch r.Via {
		case ViaMesh:
			if r.Source != nil {
				c.fail(p+".source", "role %q: source is only for via marketplace (a mesh role works in its repository)", name)
			}
			if r.Repository == "" {
				c.fail(p, "role %q: via mesh needs a repository", name)
			}
			if r.Worker != "" {
				c.fail(p+".worker", "role %q: worker is only for via marketplace", name)
			}
			if r.Timeout < 0 {
				c.fail(p+".timeout", "role %q: timeout must not be negative (it is in milliseconds)", name)
			}
			if r.SystemPrompt != "" {
				r.SystemPromptText = c.readPrompt(name, r.SystemPrompt)
				c.def.Roles[name] = r
			}
		case ViaMarketplace:
			switch {
			case r.Worker == "":
				c.fail(p, "role %q: via marketplace needs a worker, the id of a marketplace worker such as %q", name, "claude_code_assistant_v1")
			case !workerPattern.MatchString(r.Worker):
				c.fail(p+".worker", "role %q: worker %q is not a worker id (%s)", name, r.Worker, workerPattern)
			}
			for _, f := range []struct {
				field string
				set   bool
			}{{"repository", r.Repository != ""}, {"timeout", r.Timeout != 0}, {"system_prompt", r.SystemPrompt != ""}, {"model", r.Model != ""}} {
				if f.set {
					c.fail(p+"."+f.field, "role %q: %s is only for via mesh (a marketplace worker's settings are in its definition)", name, f.field)
				}
			}
			if r.Source != nil && r.Source.From != "" {
				c.fail(p+".source.from", "role %q: source.from names a node, so it goes on the node that runs from it", name)
			} else {
				c.checkSource(p+".source", fmt.Sprintf("role %q", name), r.Source)
			}
		case "":
			c.fail(p, "role %q: missing via: mesh or marketplace", name)
		default:
			c.fail(p+".via", "role %q: via %q is not one of mesh, marketplace", name, r.Via)
		}
	}
}

// readPrompt reads a role's system prompt file, relative to the pipeline's
// file.
func (c *compiler) readPrompt(role, rel string) string {
	p := "roles." + role + ".system_prompt"
	if !fs.ValidPath(rel) || path.Clean(rel) != rel || rel == "." {
		c.fail(p, "role %q: system_prompt %q must be a clean relative path, such as prompts/researcher.md", role, rel)
		return ""
	}
	full := path.Join(path.Dir(c.file), rel)
	if st, err := fs.Stat(c.fsys, full); err == nil && st.IsDir() {
		c.fail(p, "role %q: system_prompt %q is a directory, not a file", role, rel)
		return ""
	}
	data, err := readFile(c.fsys, full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.fail(p, "role %q: system_prompt %q: no such file beside the pipeline", role, rel)
		return ""
	case err != nil:
		c.fail(p, "role %q: system_prompt %q: %v", role, rel, err)
		return ""
	}
	return string(data)
}

// label names node i in messages.
func (c *compiler) label(i int) string {
	if id := c.def.Nodes[i].ID; id != "" {
		return fmt.Sprintf("node %q", id)
	}
	return fmt.Sprintf("nodes[%d]", i)
}

func nodePath(i int) string { return "nodes[" + strconv.Itoa(i) + "]" }

func (c *compiler) checkNodes() {
	nodes := c.def.Nodes
	switch {
	case len(nodes) == 0:
		c.fail("nodes", "no nodes: a pipeline needs at least one node")
		return
	case len(nodes) > MaxNodes:
		c.fail("nodes", "%d nodes are more than the %d a pipeline may have", len(nodes), MaxNodes)
		return
	}
	c.index = make(map[string]int, len(nodes))
	c.valid = make([]bool, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		p := nodePath(i)
		switch {
		case n.ID == "":
			c.fail(p, "missing id: every node needs an id such as %q", "research")
		case !namePattern.MatchString(n.ID):
			c.fail(p+".id", "node id %q must match %s", n.ID, namePattern)
		case slices.Contains(celReserved, n.ID):
			c.fail(p+".id", "node id %q is a reserved word of CEL", n.ID)
		default:
			if first, dup := c.index[n.ID]; dup {
				c.fail(p+".id", "duplicate node id %q (first at line %d)", n.ID, c.at(nodePath(first)+".id").Line)
				continue
			}
			c.index[n.ID] = i
			c.valid[i] = true
		}
	}
	for i := range nodes {
		c.checkNode(i)
	}
	c.checkGraph()
	c.checkFrom()
	c.nodes = make([]compiledNode, len(nodes))
	for i := range nodes {
		c.compileNode(i)
	}
}

// checkNode checks one node's own fields and fills in its defaults.
func (c *compiler) checkNode(i int) {
	n := &c.def.Nodes[i]
	p, label := nodePath(i), c.label(i)
	switch n.Type {
	case "":
		n.Type = TypeAgent
	case TypeAgent, TypeApproval:
	default:
		c.fail(p+".type", "%s: type %q is not one of agent, approval", label, n.Type)
	}
	switch n.Type {
	case TypeAgent:
		if len(n.Approvers) > 0 {
			c.fail(p+".approvers", "%s: only approval nodes take approvers", label)
		}
		if n.Role == "" {
			c.fail(p, "%s: missing role (%s)", label, c.roleList())
		} else if _, ok := c.def.Roles[n.Role]; !ok {
			c.fail(p+".role", "%s: unknown role %q (%s)", label, n.Role, c.roleList())
		}
		if n.Task == "" && len(n.Command) == 0 && len(n.Needs) == 0 {
			c.fail(p, "%s: missing task: a node that needs nothing has no outputs to work from", label)
		} else if n.Task == "" && n.IsForeach() {
			c.fail(p, "%s: a foreach node needs a task (each item is .item in it)", label)
		}
	case TypeApproval:
		for j, a := range n.Approvers {
			if strings.TrimSpace(a) == "" || strings.ContainsAny(a, " \t\r\n") {
				c.fail(p+".approvers["+strconv.Itoa(j)+"]", "%s: approver %q is not a caller name (no spaces)", label, a)
			}
		}
		for _, f := range []struct {
			field string
			set   bool
		}{{"role", n.Role != ""}, {"task", n.Task != ""}, {"retry", n.Retry != nil}, {"foreach", n.Foreach != ""}} {
			if f.set {
				c.fail(p+"."+f.field, "%s: approval nodes take no %s", label, f.field)
			}
		}
	}

	seen := map[string]bool{}
	for j, need := range n.Needs {
		pj := p + ".needs[" + strconv.Itoa(j) + "]"
		switch _, known := c.index[need]; {
		case seen[need]:
			c.fail(pj, "%s: needs %q twice", label, need)
		case !known:
			c.fail(pj, "%s: needs unknown node %q", label, need)
		}
		seen[need] = true
	}

	c.checkRetry(i)
	c.checkWork(i)

	switch {
	case n.MaxConcurrency < 0:
		c.fail(p+".max_concurrency", "%s: max_concurrency must be at least 1", label)
	case n.MaxConcurrency > 0 && !n.IsForeach():
		c.fail(p+".max_concurrency", "%s: max_concurrency is only for foreach nodes", label)
	case n.IsForeach() && n.MaxConcurrency == 0:
		n.MaxConcurrency = 1
	}

	switch {
	case n.MaxIterations < 0:
		c.fail(p+".max_iterations", "%s: max_iterations must be at least 1", label)
	case n.MaxIterations > 0 && n.Next == "":
		c.fail(p+".max_iterations", "%s: max_iterations is only for nodes with next", label)
	}
	if n.Next != "" {
		if _, ok := c.index[n.Next]; !ok {
			c.fail(p+".next", "%s: next names unknown node %q", label, n.Next)
		}
		if n.MaxIterations == 0 {
			c.fail(p+".next", "%s: next %q loops without a bound: add max_iterations", label, n.Next)
		}
	}
}

// checkSource checks a source's input (a declared input of type
// repository); From is checked with the graph, in checkFrom.
func (c *compiler) checkSource(p, label string, s *Source) {
	switch {
	case s == nil:
	case (s.Input == "") == (s.From == ""):
		c.fail(p, "%s: source takes exactly one of input (a repository input) or from (a node)", label)
	case s.Input != "":
		if in, ok := c.def.Inputs[s.Input]; !ok || in.Type != TypeRepository {
			c.fail(p+".input", "%s: source.input %q is not an input of type repository (%s)", label, s.Input, c.inputList())
		}
	}
}

// checkWork checks what an agent node does besides its task: its source
// and its command, both for via marketplace roles only.
func (c *compiler) checkWork(i int) {
	n := &c.def.Nodes[i]
	p, label := nodePath(i), c.label(i)
	if n.Type == TypeApproval {
		if n.Source != nil {
			c.fail(p+".source", "%s: approval nodes take no source", label)
		}
		if len(n.Command) > 0 {
			c.fail(p+".command", "%s: approval nodes take no command", label)
		}
		return
	}
	role, known := c.def.Roles[n.Role]
	if !known {
		return // refused above
	}
	if role.Via != ViaMarketplace {
		if n.Source != nil {
			c.fail(p+".source", "%s: source is only for roles via marketplace", label)
		}
		if len(n.Command) > 0 {
			c.fail(p+".command", "%s: command is only for roles via marketplace", label)
		}
		return
	}
	c.checkSource(p+".source", label, n.Source)
	if len(n.Command) > 0 {
		switch {
		case n.Task != "":
			c.fail(p+".command", "%s: a node runs a command or a task, not both", label)
		case n.IsForeach():
			c.fail(p+".command", "%s: a foreach node runs a task per item, not a command", label)
		case slices.Contains(n.Command, ""):
			c.fail(p+".command", "%s: command has an empty argument", label)
		}
	}
}

// checkFrom checks, once the graph is known, that a node's source.from
// names an ancestor with a source of its own, and that the pipeline's
// patch node has a source.
func (c *compiler) checkFrom() {
	for i := range c.def.Nodes {
		n := &c.def.Nodes[i]
		if n.Source == nil || n.Source.From == "" || n.Source.Input != "" || !c.valid[i] {
			continue
		}
		p, label := nodePath(i)+".source.from", c.label(i)
		j, ok := c.index[n.Source.From]
		switch {
		case !ok:
			c.fail(p, "%s: source.from names unknown node %q", label, n.Source.From)
		case !c.isAncestor(j, i):
			c.fail(p, "%s: source.from %q is not an ancestor through needs, so its patch may not exist yet", label, n.Source.From)
		case c.sourceOf(j) == nil:
			c.fail(p, "%s: source.from %q: that node's role has no source, so it has no patch", label, n.Source.From)
		}
	}
	if c.def.Patch != "" {
		j, ok := c.index[c.def.Patch]
		switch {
		case !ok:
			c.fail("patch", "patch names unknown node %q", c.def.Patch)
		case c.sourceOf(j) == nil:
			c.fail("patch", "patch: node %q has no source, so it has no patch", c.def.Patch)
		}
	}
}

// sourceOf is node i's effective source: its own, else its role's.
func (c *compiler) sourceOf(i int) *Source {
	n := &c.def.Nodes[i]
	if n.Source != nil {
		return n.Source
	}
	if r, ok := c.def.Roles[n.Role]; ok && n.Type == TypeAgent {
		return r.Source
	}
	return nil
}

func (c *compiler) checkRetry(i int) {
	n := &c.def.Nodes[i]
	p, label := nodePath(i)+".retry", c.label(i)
	if n.Type == TypeApproval {
		return // refused above if written
	}
	if n.Retry == nil {
		n.Retry = &Retry{MaxAttempts: 1, Backoff: meshtype.Duration(DefaultBackoff), MaxInterval: meshtype.Duration(DefaultMaxInterval)}
		return
	}
	r := n.Retry
	if r.MaxAttempts < 1 {
		c.fail(p+".max_attempts", "%s: retry needs max_attempts of at least 1", label)
	}
	if _, written := c.pos[p+".backoff"]; !written {
		r.Backoff = meshtype.Duration(DefaultBackoff)
	}
	if _, written := c.pos[p+".max_interval"]; !written {
		r.MaxInterval = meshtype.Duration(max(DefaultMaxInterval, time.Duration(r.Backoff)))
	} else if r.MaxInterval < r.Backoff {
		c.fail(p+".max_interval", "%s: retry.max_interval (%s) must be at least retry.backoff (%s)", label, r.MaxInterval, r.Backoff)
	}
}

func (c *compiler) roleList() string {
	if len(c.def.Roles) == 0 {
		return "the pipeline has no roles"
	}
	return "roles: " + strings.Join(slices.Sorted(maps.Keys(c.def.Roles)), ", ")
}

func (c *compiler) inputList() string { return inputNames(c.def.Inputs) }

// compileNode compiles a node's expressions and templates, once the graph is
// known: they may reference only the node's ancestors.
func (c *compiler) compileNode(i int) {
	n := &c.def.Nodes[i]
	cn := &c.nodes[i]
	if c.valid[i] {
		for j := range c.def.Nodes {
			if c.valid[j] && slices.Contains(c.def.Nodes[j].Needs, n.ID) {
				cn.successors = append(cn.successors, c.def.Nodes[j].ID)
			}
		}
	}
	if n.When != "" {
		cn.when = c.compileCEL(i, "when", n.When)
	}
	if n.IsForeach() {
		if strings.Contains(n.Foreach, "{{") {
			cn.foreachTmpl = c.compileTemplate(i, "foreach", n.Foreach, scope{})
		} else {
			cn.foreachCEL = c.compileCEL(i, "foreach", n.Foreach)
		}
	}
	if n.Type == TypeAgent && len(n.Command) == 0 {
		if n.Task == "" && len(n.Needs) > 0 && !slices.ContainsFunc(n.Needs, func(id string) bool { _, ok := c.index[id]; return !ok }) {
			n.Task = defaultTask(n.Needs)
		}
		if n.Task != "" {
			cn.task = c.compileTemplate(i, "task", n.Task, scope{item: n.IsForeach()})
		}
	}
	if n.Output != "" {
		cn.output = c.compileTemplate(i, "output", n.Output, scope{result: true})
	}
}

// defaultTask is the task of an agent node that wrote none: the outputs of
// the nodes it needs, separated by blank lines.
func defaultTask(needs []string) string {
	parts := make([]string, len(needs))
	for i, id := range needs {
		parts[i] = "{{ .nodes." + id + ".output }}"
	}
	return strings.Join(parts, "\n\n")
}

// hashDefinition is the hex SHA-256 of the definition's JSON: struct fields
// in a fixed order, map keys sorted, defaults filled in.
func hashDefinition(d *Definition) string {
	b, err := json.Marshal(d)
	if err != nil {
		panic("pipeline: definition does not encode: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
