package pipeline_test

import (
	"slices"
	"testing"
)

// A diamond with a second root and a loop back:
//
//	a   e
//	/ \  |
//	b  c |
//	\ /  |
//	 d --'
func TestGraph(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, `name: p
roles: {r: {via: mesh, repository: w}}
nodes:
  - {id: d, role: r, needs: [c, b, e], next: a, max_iterations: 2}
  - {id: c, role: r, needs: [a]}
  - {id: e, role: r, task: x}
  - {id: b, role: r, needs: [a]}
  - {id: a, role: r, task: x}
`)
	if got := p.Roots(); !slices.Equal(got, []string{"e", "a"}) {
		t.Errorf("Roots = %v, want [e a] (file order)", got)
	}
	for id, want := range map[string][]string{"a": {"c", "b"}, "b": {"d"}, "c": {"d"}, "e": {"d"}, "d": nil, "z": nil} {
		if got := p.Successors(id); !slices.Equal(got, want) {
			t.Errorf("Successors(%s) = %v, want %v", id, got, want)
		}
	}
	// Ties keep file order: e before a, c before b.
	if got := p.Order(); !slices.Equal(got, []string{"e", "a", "c", "b", "d"}) {
		t.Errorf("Order = %v", got)
	}
	// The slices are copies.
	p.Roots()[0] = "x"
	p.Order()[0] = "x"
	p.Successors("a")[0] = "x"
	if p.Roots()[0] != "e" || p.Order()[0] != "e" || p.Successors("a")[0] != "c" {
		t.Error("callers can modify the pipeline's graph")
	}
	// The default task of a join lists its needs in needs order.
	if d, _ := p.Node("d"); d.Task != "{{ .nodes.c.output }}\n\n{{ .nodes.b.output }}\n\n{{ .nodes.e.output }}" {
		t.Errorf("d's task %q", d.Task)
	}
}
