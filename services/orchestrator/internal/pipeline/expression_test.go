package pipeline_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

const whenPipeline = `name: p
inputs:
  topic: {type: string, required: true}
  depth: {type: number, default: 2}
  opts: {type: object}
roles: {r: {via: mesh, repository: w}}
nodes:
  - {id: a, role: r, task: x}
  - {id: always, role: r, needs: [a]}
  - {id: changes, role: r, needs: [a], when: "nodes.a.output.contains('CHANGES')"}
  - {id: deep, role: r, needs: [a], when: "inputs.depth > 1 && nodes.a.status == 'succeeded' && nodes.a.attempts < 3 && nodes.a.iteration == 1"}
  - {id: dyn, role: r, needs: [a], when: "inputs.opts.flag"}
  - {id: has, role: r, needs: [a], when: "has(nodes.always)"}
  - {id: costly, role: r, needs: [a], when: "[1,2,3,4,5,6,7,8,9,10].all(i, [1,2,3,4,5,6,7,8,9,10].all(j, [1,2,3,4,5,6,7,8,9,10].all(k, [1,2,3,4,5,6,7,8,9,10].all(l, [1,2,3,4,5,6,7,8,9,10].all(m, [1,2,3,4,5,6,7,8,9,10].all(n, inputs.topic != ''))))))"}
`

func TestEvalWhen(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, whenPipeline)
	inputs, err := p.CheckInputs(map[string]any{"topic": "go", "opts": map[string]any{"flag": true}})
	if err != nil {
		t.Fatal(err)
	}
	done := func(out string) pipeline.State {
		return pipeline.State{Inputs: inputs, Nodes: map[string]pipeline.NodeState{
			"a": {Output: out, Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: 1},
		}}
	}
	tests := []struct {
		node    string
		state   pipeline.State
		want    bool
		wantErr string
	}{
		{"a", pipeline.State{}, true, ""},
		{"always", done(""), true, ""},
		{"changes", done("CHANGES: more detail"), true, ""},
		{"changes", done("APPROVED"), false, ""},
		{"deep", done(""), true, ""},
		{"dyn", done(""), true, ""},
		{"has", done(""), false, ""},
		{"changes", pipeline.State{Inputs: inputs}, false, `evaluating the when of node "changes": no such key: a`},
		{"dyn", pipeline.State{Inputs: map[string]any{"opts": map[string]any{"flag": "yes"}}, Nodes: done("").Nodes}, false, `evaluating the when of node "dyn": got string, want a bool`},
		{"costly", done(""), false, `evaluating the when of node "costly": operation cancelled: actual cost limit exceeded`},
		{"nope", done(""), false, `pipeline p has no node "nope"`},
	}
	for _, tt := range tests {
		got, err := p.EvalWhen(tt.node, tt.state)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("EvalWhen(%s) error %v, want %s", tt.node, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("EvalWhen(%s) = %v, %v; want %v", tt.node, got, err, tt.want)
		}
	}
	st := done("")
	st.Nodes["always"] = pipeline.NodeState{Output: "x", Status: pipeline.StatusSucceeded}
	if ok, err := p.EvalWhen("has", st); !ok || err != nil {
		t.Errorf("has: %v, %v", ok, err)
	}
}

func TestForeachItems(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, `name: p
inputs: {files: {type: object}}
roles: {r: {via: mesh, repository: w}}
nodes:
  - {id: a, role: r, task: x}
  - {id: cel, role: r, needs: [a], foreach: "inputs.files.names", task: "{{ .index }}={{ .item }}", max_concurrency: 2}
  - {id: mixed, role: r, needs: [a], foreach: "[1, 'two', 3.5, true, null, {'k': [1]}, nodes.a.output]", task: "{{ .item }}"}
  - {id: split, role: r, needs: [a], foreach: "{{ .nodes.a.output }}", task: "{{ .item }}"}
  - {id: none, role: r, needs: [a]}
`)
	inputs, err := p.CheckInputs(map[string]any{"files": map[string]any{"names": []string{"a.go", "b.go"}}})
	if err != nil {
		t.Fatal(err)
	}
	state := pipeline.State{Inputs: inputs, Nodes: map[string]pipeline.NodeState{"a": {Output: " one\n\n two \nthree", Status: pipeline.StatusSucceeded}}}
	for id, want := range map[string][]any{
		"cel":   {"a.go", "b.go"},
		"mixed": {int64(1), "two", 3.5, true, nil, map[string]any{"k": []any{int64(1)}}, " one\n\n two \nthree"},
		"split": {"one", "two", "three"},
	} {
		got, err := p.ForeachItems(id, state)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ForeachItems(%s) = %#v, %v; want %#v", id, got, err, want)
		}
	}
	if n, _ := p.Node("cel"); n.MaxConcurrency != 2 {
		t.Errorf("max_concurrency %d", n.MaxConcurrency)
	}
	if n, _ := p.Node("split"); n.MaxConcurrency != 1 {
		t.Errorf("max_concurrency defaults to %d, want 1", n.MaxConcurrency)
	}
	got, err := p.ForeachItems("split", pipeline.State{Nodes: map[string]pipeline.NodeState{"a": {Output: "\n  \n"}}})
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("no lines: %#v, %v; want no items", got, err)
	}
	for id, wantErr := range map[string]string{
		"none": `node "none" has no foreach`,
		"nope": `pipeline p has no node "nope"`,
	} {
		if _, err := p.ForeachItems(id, state); err == nil || !strings.HasPrefix(err.Error(), wantErr) {
			t.Errorf("ForeachItems(%s): %v, want %s...", id, err, wantErr)
		}
	}
	if _, err := p.ForeachItems("cel", pipeline.State{Inputs: map[string]any{"files": map[string]any{"names": "a.go"}}}); err == nil ||
		err.Error() != `evaluating the foreach of node "cel": got string, want a list` {
		t.Errorf("a foreach that is not a list: %v", err)
	}
	if _, err := p.ForeachItems("split", pipeline.State{}); err == nil || !strings.Contains(err.Error(), `map has no entry for key "a"`) {
		t.Errorf("a foreach template over a missing output: %v", err)
	}
}

func TestForeachItemsLimit(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, `name: p
inputs: {n: {type: object}, text: {type: string}}
roles: {r: {via: mesh, repository: w}}
nodes:
  - {id: cel, role: r, foreach: "inputs.n.list", task: "{{ .item }}"}
  - {id: tmpl, role: r, foreach: "{{ .inputs.text }}", task: "{{ .item }}"}
`)
	list := make([]any, pipeline.MaxForeachItems+1)
	inputs, err := p.CheckInputs(map[string]any{"n": map[string]any{"list": list}, "text": strings.Repeat("x\n", pipeline.MaxForeachItems+1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"cel", "tmpl"} {
		_, err := p.ForeachItems(id, pipeline.State{Inputs: inputs})
		if want := `the foreach of node "` + id + `" gave 1001 items, more than 1000`; err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", id, err, want)
		}
	}
	inputs["n"] = map[string]any{"list": list[:pipeline.MaxForeachItems]}
	if items, err := p.ForeachItems("cel", pipeline.State{Inputs: inputs}); err != nil || len(items) != pipeline.MaxForeachItems {
		t.Errorf("%d items: %v", len(items), err)
	}
}
