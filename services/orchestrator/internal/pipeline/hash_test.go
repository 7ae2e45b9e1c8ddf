package pipeline_test

import (
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

func TestHash(t *testing.T) {
	t.Parallel()
	const base = `name: p
inputs: {n: {type: number, default: 2}}
roles:
  r: {via: mesh, repository: w, system_prompt: prompts/r.md}
  m: {via: marketplace, worker: git_v1}
nodes:
  - {id: a, role: r, task: x}
  - {id: b, role: m, needs: [a], retry: {max_attempts: 2}}
`
	h := mustLoad(t, base).Hash()
	if len(h) != 64 {
		t.Fatalf("hash %q", h)
	}
	same := map[string]string{
		"again": base,
		"comments, formatting and key order": `# a comment
name: p
roles:
  m:
    worker: git_v1
    via: marketplace
  r: {repository: w, via: mesh, system_prompt: prompts/r.md}   # same role
inputs:
  n: {default: 2.0, type: number}
nodes:
  - {task: x, id: a, role: r}
  - {id: b, needs: [a], role: m, retry: {max_attempts: 2, backoff: 1s}, type: agent}
`,
		"the default task written out": base[:len(base)-len("retry: {max_attempts: 2}}\n")] + "retry: {max_attempts: 2}, task: '{{ .nodes.a.output }}'}\n",
	}
	for name, src := range same {
		if got := mustLoad(t, src).Hash(); got != h {
			t.Errorf("%s: the hash changed", name)
		}
	}
	different := map[string]string{
		"a task":         base[:len(base)-len("  - {id: b, role: m, needs: [a], retry: {max_attempts: 2}}\n")] + "  - {id: b, role: m, needs: [a], retry: {max_attempts: 2}, task: y}\n",
		"a retry":        base[:len(base)-len("2}}\n")] + "3}}\n",
		"a default":      "name: p\ninputs: {n: {type: number, default: 3}}\n" + base[len("name: p\ninputs: {n: {type: number, default: 2}}\n"):],
		"the name":       "name: q\n" + base[len("name: p\n"):],
		"a node's order": "name: p\ninputs: {n: {type: number, default: 2}}\nroles:\n  r: {via: mesh, repository: w, system_prompt: prompts/r.md}\n  m: {via: marketplace, worker: git_v1}\nnodes:\n  - {id: b, role: m, needs: [a], retry: {max_attempts: 2}}\n  - {id: a, role: r, task: x}\n",
	}
	for name, src := range different {
		if got := mustLoad(t, src).Hash(); got == h {
			t.Errorf("%s: the hash did not change", name)
		}
	}
	// The system prompt's text is part of the pipeline.
	p, err := pipeline.Load(files("p.yaml", base, "prompts/r.md", "You research carefully."), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Hash() == h {
		t.Error("a changed system prompt kept the hash")
	}
}
