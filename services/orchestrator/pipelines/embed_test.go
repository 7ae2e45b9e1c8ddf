package pipelines_test

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/pipelines"
)

// Every shipped pipeline loads: every *.yaml file is in the catalog.
func TestShippedPipelinesLoad(t *testing.T) {
	t.Parallel()
	cat, err := pipelines.Load()
	if err != nil {
		t.Fatalf("the built-in pipelines do not load:\n%v", err)
	}
	files, err := fs.Glob(pipelines.FS(), "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var loaded []string
	for _, p := range cat.Pipelines() {
		loaded = append(loaded, p.File())
		if p.Definition().Description == "" {
			t.Errorf("%s has no description", p.Name())
		}
	}
	if !slices.Equal(files, loaded) {
		t.Errorf("files %v, loaded %v", files, loaded)
	}
}

// research_pipeline is the architecture's example: researcher (mesh) ->
// writer (marketplace) -> reviewer (mesh) with retries, a revise loop bounded
// at three iterations, and an approval.
func TestResearchPipeline(t *testing.T) {
	t.Parallel()
	cat, err := pipelines.Load()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := cat.Lookup("research_pipeline")
	if !ok {
		t.Fatal("research_pipeline is missing")
	}
	d := p.Definition()
	if r := d.Roles["researcher"]; r.Via != pipeline.ViaMesh || r.Repository != "research_workspace" || !strings.Contains(r.SystemPromptText, "researcher") {
		t.Errorf("researcher %+v", r)
	}
	if r := d.Roles["writer"]; r.Via != pipeline.ViaMarketplace || r.Worker != "claude_code_assistant_v1" {
		t.Errorf("writer %+v", r)
	}
	if r := d.Roles["reviewer"]; r.Via != pipeline.ViaMesh || r.Repository != "review_workspace" {
		t.Errorf("reviewer %+v", r)
	}
	if got := p.Order(); !slices.Equal(got, []string{"research", "write", "review", "revise", "approve"}) {
		t.Errorf("order %v", got)
	}
	if review, _ := p.Node("review"); review.Retry.MaxAttempts != 3 || time.Duration(review.Retry.Backoff) != 2*time.Second {
		t.Errorf("review retry %+v", review.Retry)
	}
	revise, _ := p.Node("revise")
	if revise.Next != "write" || revise.MaxIterations != 3 {
		t.Errorf("revise loops to %q %d times", revise.Next, revise.MaxIterations)
	}
	if approve, _ := p.Node("approve"); approve.Type != pipeline.TypeApproval {
		t.Errorf("approve is %s", approve.Type)
	}

	// A run through it.
	if _, err := p.CheckInputs(nil); err == nil {
		t.Error("the task input is not required")
	}
	inputs, err := p.CheckInputs(map[string]any{"task": "How do Go's iterators work?"})
	if err != nil {
		t.Fatal(err)
	}
	state := pipeline.State{Inputs: inputs, Nodes: map[string]pipeline.NodeState{}}
	task, err := p.RenderTask("research", state)
	if err != nil || task != "How do Go's iterators work?" {
		t.Errorf("research task %q, %v", task, err)
	}
	state.Nodes["research"] = pipeline.NodeState{Output: "NOTES", Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: 1}
	task, err = p.RenderTask("write", state)
	if err != nil || !strings.Contains(task, "for software engineers") || !strings.HasSuffix(task, "\nNOTES\n") {
		t.Errorf("write task %q, %v", task, err)
	}
	state.Nodes["write"] = pipeline.NodeState{Output: "REPORT", Status: pipeline.StatusSucceeded, Attempts: 1, Iteration: 1}
	for review, revise := range map[string]bool{"CHANGES: cite sources": true, "APPROVED": false} {
		state.Nodes["review"] = pipeline.NodeState{Output: review, Status: pipeline.StatusSucceeded, Attempts: 2, Iteration: 1}
		if got, err := p.EvalWhen("revise", state); err != nil || got != revise {
			t.Errorf("review %q: revise %v, %v; want %v", review, got, err, revise)
		}
	}
}
