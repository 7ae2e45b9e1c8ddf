package pipeline_test

import (
	"errors"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// FuzzLoad feeds arbitrary YAML as a pipeline. Load must not panic, every
// error must carry a position in the file, and loading the same bytes twice
// must give the same result. A pipeline that loads must be usable: its graph
// methods and when conditions must not panic on an empty state.
func FuzzLoad(f *testing.F) {
	for _, seed := range []string{
		architectureExample,
		"name: p\nroles: {r: {via: mesh, repository: w}}\nnodes: [{id: a, role: r, task: x}]\n",
		"name: p\ninputs: {t: {type: string, default: x}, o: {type: object, default: {a: [1, 2.5, true, null]}}}\nroles: {r: {via: marketplace, worker: git_v1}}\nnodes:\n  - {id: a, role: r, task: '{{ .inputs.t }}', when: 'inputs.t == \"x\"', foreach: 'inputs.o.a', max_concurrency: 2}\n  - {id: b, role: r, needs: [a], next: a, max_iterations: 2, output: '{{ .result }}'}\n",
		"name: p\nroles: {r: {via: mesh, repository: w}}\nnodes:\n  - {id: a, role: r, needs: [b]}\n  - {id: b, role: r, needs: [a]}\n  - {id: c, role: r, needs: [a, z]}\n",
		"name: p\nnodes:\n  - {id: a, type: approval, role: r, task: x, retry: {max_attempts: 0, backoff: 1x}}\n",
		"name: p\nroles: {r: &x {via: mesh}}\nnodes: [*x, {<<: *x}]\n",
		"name: p\nnodes:\n  - {id: a, task: '{{ define \"x\" }}{{ end }}{{ template \"x\" }}{{ $.nodes }}{{ (.).x }}'}\n",
		"name: p\ninputs: {n: {type: number, default: .inf}}\n",
		"{{{{",
		"- - - -\n",
		"name: p\nname: p\n",
		"name: !!binary aGVsbG8=\nnodes: !!map {}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := files("p.yaml", string(data), "prompts/researcher.md", "prompt")
		p1, err1 := pipeline.Load(fsys, "p.yaml")
		p2, err2 := pipeline.Load(fsys, "p.yaml")
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("different results: %v / %v", err1, err2)
		}
		if err1 != nil {
			var es pipeline.Errors
			if !errors.As(err1, &es) || len(es) == 0 {
				t.Fatalf("error is not pipeline.Errors: %v", err1)
			}
			for _, e := range es {
				if e.File != "p.yaml" || e.Line < 1 || e.Column < 1 || e.Msg == "" {
					t.Fatalf("error without a position: %#v", e)
				}
			}
			return
		}
		if p1.Hash() != p2.Hash() {
			t.Fatal("the same pipeline hashed differently")
		}
		if len(p1.Order()) != len(p1.Definition().Nodes) || len(p1.Roots()) == 0 {
			t.Fatalf("order %v of %d nodes, roots %v", p1.Order(), len(p1.Definition().Nodes), p1.Roots())
		}
		inputs, _ := p1.CheckInputs(nil)
		for _, id := range p1.Order() {
			_ = p1.Successors(id)
			_, _ = p1.EvalWhen(id, pipeline.State{Inputs: inputs})
		}
	})
}
