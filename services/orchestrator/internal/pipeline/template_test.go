package pipeline_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

const templatePipeline = `name: p
inputs:
  topic: {type: string, required: true}
  depth: {type: number, default: 2}
  opts: {type: object, default: {tone: dry, tags: [a, b]}}
  verbose: {type: boolean}
roles: {r: {via: mesh, repository: w}}
nodes:
  - id: research
    role: r
    task: "Research {{ .inputs.topic }} to depth {{ .inputs.depth }}{{ if .inputs.verbose }}, verbosely{{ end }}."
  - id: write
    role: r
    needs: [research]
    task: |
      Write in a {{ .inputs.opts.tone }} tone{{ range .inputs.opts.tags }} #{{ . }}{{ end }}:
      {{ .nodes.research.output }}
    output: "{{ .result | printf \"%.5s\" }} (from {{ len .nodes.research.output }} bytes)"
  - {id: each, role: r, needs: [research], foreach: "{{ .nodes.research.output }}", task: "{{ .index }}: {{ .item }} of {{ .inputs.topic }}"}
  - {id: join, role: r, needs: [write, each]}
  - {id: approve, type: approval, needs: [join]}
  - {id: big, role: r, needs: [research], task: "{{ range 20 }}{{ $.nodes.research.output }}{{ end }}"}
`

func TestRenderTask(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, templatePipeline)
	inputs, err := p.CheckInputs(map[string]any{"topic": "Go", "verbose": true})
	if err != nil {
		t.Fatal(err)
	}
	state := pipeline.State{Inputs: inputs, Nodes: map[string]pipeline.NodeState{
		"research": {Output: "notes", Status: pipeline.StatusSucceeded},
		"write":    {Output: "report", Status: pipeline.StatusSucceeded},
		"each":     {Output: "items", Status: pipeline.StatusSucceeded},
	}}
	for id, want := range map[string]string{
		"research": "Research Go to depth 2, verbosely.",
		"write":    "Write in a dry tone #a #b:\nnotes\n",
		"join":     "report\n\nitems",
	} {
		if got, err := p.RenderTask(id, state); err != nil || got != want {
			t.Errorf("RenderTask(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
	if got, err := p.RenderItemTask("each", state, 3, "channels"); err != nil || got != "3: channels of Go" {
		t.Errorf("RenderItemTask = %q, %v", got, err)
	}
	if got, err := p.RenderOutput("write", state, "a long report"); err != nil || got != "a lon (from 5 bytes)" {
		t.Errorf("RenderOutput = %q, %v", got, err)
	}
	if got, err := p.RenderOutput("research", state, "raw"); err != nil || got != "raw" {
		t.Errorf("RenderOutput without a template = %q, %v", got, err)
	}
}

// Missing keys are errors, never "<no value>".
func TestRenderTaskErrors(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, templatePipeline)
	inputs, err := p.CheckInputs(map[string]any{"topic": "Go"})
	if err != nil {
		t.Fatal(err)
	}
	noOutputs := pipeline.State{Inputs: inputs}
	tests := []struct {
		name string
		err  func() error
		want string
	}{
		{
			"an output that does not exist yet", func() error { _, err := p.RenderTask("write", noOutputs); return err },
			`rendering the task of node "write": template: task:2:9: executing "task" at <.nodes.research.output>: map has no entry for key "research"`,
		},
		{
			"an input the run lacks", func() error { _, err := p.RenderTask("research", pipeline.State{}); return err },
			`rendering the task of node "research": template: task:1:19: executing "task" at <.inputs.topic>: map has no entry for key "topic"`,
		},
		{
			"an approval node", func() error { _, err := p.RenderTask("approve", noOutputs); return err },
			`node "approve" is an approval node: it has no task`,
		},
		{
			"a foreach node without its item", func() error { _, err := p.RenderTask("each", noOutputs); return err },
			`node "each" has a foreach: render each item's task with RenderItemTask`,
		},
		{
			"an item for a node without foreach", func() error { _, err := p.RenderItemTask("write", noOutputs, 0, "x"); return err },
			`node "write" has no foreach, so its task has no item`,
		},
		{
			"an unknown node", func() error { _, err := p.RenderTask("nope", noOutputs); return err },
			`pipeline p has no node "nope"`,
		},
		{
			"an output template over a missing output", func() error { _, err := p.RenderOutput("write", noOutputs, "x"); return err },
			`rendering the output of node "write": template: output:1:49: executing "output" at <.nodes.research.output>: map has no entry for key "research"`,
		},
		{
			"an output of an unknown node", func() error { _, err := p.RenderOutput("nope", noOutputs, "x"); return err },
			`pipeline p has no node "nope"`,
		},
	}
	for _, tt := range tests {
		if err := tt.err(); err == nil || err.Error() != tt.want {
			t.Errorf("%s: got\n%v\nwant\n%s", tt.name, err, tt.want)
		}
	}
}

func TestRenderRefusesHugeText(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, templatePipeline)
	state := pipeline.State{Nodes: map[string]pipeline.NodeState{"research": {Output: strings.Repeat("x", pipeline.MaxRenderedSize/10)}}}
	_, err := p.RenderTask("big", state)
	if !errors.Is(err, pipeline.ErrTooLarge) {
		t.Errorf("got %v, want ErrTooLarge", err)
	}
}
