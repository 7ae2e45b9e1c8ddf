package engine_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/enginetest"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// A node's workspace is taken from the journey its attempt recorded, and
// only while that journey still holds the node's change: two nodes of one
// role work in one journey, so once the second changed it, the first's
// export is a conflict, in the run and in its forks (the export on the real
// marketplace is in TestCodingPipeline).
func TestExportWorkspace(t *testing.T) {
	t.Parallel()
	pipelines := maps.Clone(enginetest.Pipelines)
	pipelines["change.yaml"] = &fstest.MapFile{Data: []byte(`name: change
inputs:
  repository: {type: repository, required: true}
roles:
  coder: {via: marketplace, worker: filesystem_write_v1, source: {input: repository}}
nodes:
  - {id: implement, role: coder, task: change it}
  - {id: polish, role: coder, needs: [implement], task: polish it}
  - {id: approve, type: approval, needs: [polish]}
patch: implement
`)}
	patches := map[string]string{"implement": "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-a\n+b\n", "polish": "diff --git a/b b/b\n--- a/b\n+++ b/b\n@@ -1 +1 @@\n-b\n+c\n"}
	x := &enginetest.InstantExecutor{Record: true, Patch: func(req executor.Request) string { return patches[req.NodeID] }}
	b := enginetest.StartWithExecutor(t, pipelines, x)
	ctx := context.Background()
	run := start(t, b.Engine, "change", map[string]any{"repository": map[string]any{"git": map[string]any{"url": "/sources/calc"}}})
	v := waitStatus(t, b.Engine, run.ID, runstate.RunWaiting, runstate.RunFailed)
	if v.Status != runstate.RunWaiting {
		t.Fatalf("run %s (%s)", v.Status, v.Error)
	}

	ws, err := export(ctx, b.Engine, run.ID, "polish", "bundle")
	if err != nil {
		t.Fatal(err)
	}
	if want := "bundle of journey-" + v.Thread + "-coder\n" + patches["polish"]; string(ws.Content) != want || ws.Commit != "c0ffee" || ws.NodeID != "polish" {
		t.Errorf("polish's export: %+v, want content %q", ws, want)
	}
	_, err = export(ctx, b.Engine, run.ID, "implement", "tar")
	if code := engine.ErrorCode(err); code != meshapi.CodeConflict || !strings.Contains(err.Error(), "has moved on") {
		t.Errorf("implement's export after polish changed its journey: %v (%s), want a conflict", err, code)
	}

	// A fork that runs polish again, on a thread of its own: its polish is
	// in its own journey, its implement still the run's (through the fork),
	// which polish moved on.
	fork, err := b.Engine.Fork(ctx, engine.ForkRequest{RunID: run.ID, Seq: v.HeadSeq, Patch: &runstate.State{Nodes: map[string]pipeline.NodeState{
		"polish": {Status: "pending"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	fv := waitStatus(t, b.Engine, fork.ID, runstate.RunWaiting, runstate.RunFailed)
	if fv.Status != runstate.RunWaiting || fv.Thread == v.Thread {
		t.Fatalf("the fork %s on thread %s (%s)", fv.Status, fv.Thread, fv.Error)
	}
	if fws, err := export(ctx, b.Engine, fv.ID, "polish", "tar"); err != nil || fws.Journey != "journey-"+fv.Thread+"-coder" {
		t.Errorf("the fork's polish: %+v, %v; want its own journey", fws, err)
	}
	if _, err := export(ctx, b.Engine, fv.ID, "implement", "tar"); engine.ErrorCode(err) != meshapi.CodeConflict || !strings.Contains(err.Error(), "journey-"+v.Thread+"-coder") {
		t.Errorf("the fork's implement: %v, want a conflict over the run's journey", err)
	}
	// Four exports at once are under way, each until its content is
	// delivered (written to its client); a fifth is refused until one is
	// done.
	delivering, delivered := make(chan struct{}, 4), make(chan struct{})
	release := sync.OnceFunc(func() { close(delivered) })
	t.Cleanup(release) // a failure below leaves no export waiting
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			errs <- b.Engine.ExportWorkspace(ctx, run.ID, "polish", "tar", func(engine.WorkspaceExport) error {
				delivering <- struct{}{}
				<-delivered
				return nil
			})
		})
	}
	for range 4 {
		select {
		case <-delivering:
		case <-time.After(10 * time.Second):
			t.Fatal("fewer than 4 exports reached their delivery at once")
		}
	}
	_, err = export(ctx, b.Engine, run.ID, "polish", "tar")
	if engine.ErrorCode(err) != meshapi.CodeResourceExhausted {
		t.Errorf("a fifth export while four deliver: %v, want resource_exhausted", err)
	}
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("one of the four exports: %v", err)
		}
	}
	if _, err := export(ctx, b.Engine, run.ID, "polish", "tar"); err != nil {
		t.Errorf("an export once the four were delivered: %v", err)
	}
	// A delivery's error is the export's.
	if err := b.Engine.ExportWorkspace(ctx, run.ID, "polish", "tar", func(engine.WorkspaceExport) error { return errBrokenPipe }); !errors.Is(err, errBrokenPipe) {
		t.Errorf("an export whose delivery failed: %v, want its error", err)
	}
	// Another caller's run is not there.
	_, err = export(engine.WithViewer(ctx, engine.Viewer{Caller: "mallory"}), b.Engine, run.ID, "polish", "tar")
	if engine.ErrorCode(err) != meshapi.CodeNotFound {
		t.Errorf("another caller's export: %v, want not_found", err)
	}
}

// errBrokenPipe is a delivery's failure: a client gone half-way.
var errBrokenPipe = errors.New("broken pipe")

// export is eng's export of node in run, delivered here.
func export(ctx context.Context, eng *engine.Engine, runID, node, format string) (engine.WorkspaceExport, error) {
	var out engine.WorkspaceExport
	err := eng.ExportWorkspace(ctx, runID, node, format, func(ws engine.WorkspaceExport) error {
		out = ws
		return nil
	})
	return out, err
}
