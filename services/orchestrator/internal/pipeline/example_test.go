package pipeline_test

import (
	"fmt"
	"testing/fstest"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

func ExampleLoad() {
	fsys := fstest.MapFS{"review.yaml": {Data: []byte(`name: review
inputs: {file: {type: string, required: true}}
roles:
  reviewer: {via: mesh, repository: review_workspace}
nodes:
  - {id: read, role: reviewer, task: "Read {{ .inputs.file }}"}
  - {id: review, role: reviewer, needs: [read], when: "nodes.read.output != ''", task: "Review: {{ .nodes.read.output }}"}
`)}}
	p, err := pipeline.Load(fsys, "review.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	inputs, _ := p.CheckInputs(map[string]any{"file": "main.go"})
	state := pipeline.State{Inputs: inputs, Nodes: map[string]pipeline.NodeState{}}
	task, _ := p.RenderTask("read", state)
	fmt.Println(p.Order(), task)

	state.Nodes["read"] = pipeline.NodeState{Output: "package main", Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: 1}
	run, _ := p.EvalWhen("review", state)
	task, _ = p.RenderTask("review", state)
	fmt.Println(run, task)

	fsys["broken.yaml"] = &fstest.MapFile{Data: []byte(`name: broken
roles: {reviewer: {via: mesh, repository: review_workspace}}
nodes:
  - {id: review, role: reviewer, task: "Review {{ .nodes.read.output }}", retry: {max_attempts: 0}}
`)}
	_, err = pipeline.Load(fsys, "broken.yaml")
	fmt.Println(err)
	// Output:
	// [read review] Read main.go
	// true Review: package main
	// broken.yaml:4:40: node "review": task: .nodes.read.output: unknown node "read"
	// broken.yaml:4:97: node "review": retry needs max_attempts of at least 1
}
