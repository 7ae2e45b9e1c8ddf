package pipeline

import (
	"slices"
	"text/template"

	"cel.dev/cel-go/cel"
)

// Pipeline is a loaded, validated and compiled pipeline. It is immutable and
// safe for concurrent use.
type Pipeline struct {
	def     Definition
	file    string
	hash    string
	namePos position
	index   map[string]int // node id -> index in def.Nodes
	nodes   []compiledNode // parallel to def.Nodes
	roots   []string
	order   []string
}

type position struct{ Line, Column int }

// compiledNode is what Load prepared for one node.
type compiledNode struct {
	successors  []string
	when        cel.Program        // nil: always
	foreachCEL  cel.Program        // set for a CEL foreach
	foreachTmpl *template.Template // set for a template foreach
	task        *template.Template // nil for approval nodes
	output      *template.Template // nil without an output template
}

// Name returns the pipeline's name.
func (p *Pipeline) Name() string { return p.def.Name }

// File returns the file the pipeline was loaded from.
func (p *Pipeline) File() string { return p.file }

// Definition returns the pipeline with every default filled in. It is shared:
// callers must not modify it.
func (p *Pipeline) Definition() *Definition { return &p.def }

// Hash returns the hex SHA-256 of the pipeline's definition (defaults filled
// in, system prompts included). It changes with anything that can change how
// the pipeline runs, and not with comments, formatting, key order or the
// file's name, so a run records it and a resumed run can refuse a pipeline
// that changed.
func (p *Pipeline) Hash() string { return p.hash }

// Node returns the node with the given id.
func (p *Pipeline) Node(id string) (*Node, bool) {
	i, ok := p.index[id]
	if !ok {
		return nil, false
	}
	return &p.def.Nodes[i], true
}

// Role returns the role of an agent node, or false for an approval node or
// an unknown id.
func (p *Pipeline) Role(nodeID string) (Role, bool) {
	n, ok := p.Node(nodeID)
	if !ok || n.Type != TypeAgent {
		return Role{}, false
	}
	r, ok := p.def.Roles[n.Role]
	return r, ok
}

// Roots returns the nodes that need nothing, which start a run, in file order.
func (p *Pipeline) Roots() []string { return slices.Clone(p.roots) }

// Successors returns the nodes that need the node id, in file order: those
// that may become ready when it finishes. A node's loop back is its Next,
// not a successor.
func (p *Pipeline) Successors(id string) []string {
	i, ok := p.index[id]
	if !ok {
		return nil
	}
	return slices.Clone(p.nodes[i].successors)
}

// Order returns every node in a topological order of needs: a node comes
// after every node it needs, and ties keep file order.
func (p *Pipeline) Order() []string { return slices.Clone(p.order) }

// Source is node id's effective source: its own, else its role's; nil for
// none.
func (p *Pipeline) Source(id string) *Source {
	n, ok := p.Node(id)
	if !ok || n.Type != TypeAgent {
		return nil
	}
	if n.Source != nil {
		return n.Source
	}
	return p.def.Roles[n.Role].Source
}

// PatchNode is the node whose patch is the run's patch: the pipeline's
// patch setting, else the last node in file order with a source; "" when no
// node has one.
func (p *Pipeline) PatchNode() string {
	if p.def.Patch != "" {
		return p.def.Patch
	}
	for i := len(p.def.Nodes) - 1; i >= 0; i-- {
		if p.Source(p.def.Nodes[i].ID) != nil {
			return p.def.Nodes[i].ID
		}
	}
	return ""
}
