package journeys_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// heldRuntime holds the first call to Create (before it) or Remove (after
// it), as set, until released, having said it was reached: a spawn or a
// stop caught half-way.
type heldRuntime struct {
	workerruntime.Runtime
	holdCreate, holdRemove bool
	once                   sync.Once
	reached, release       chan struct{}
}

func hold(create, remove bool) (*heldRuntime, func(workerruntime.Runtime) workerruntime.Runtime) {
	h := &heldRuntime{holdCreate: create, holdRemove: remove, reached: make(chan struct{}), release: make(chan struct{})}
	return h, func(rt workerruntime.Runtime) workerruntime.Runtime { h.Runtime = rt; return h }
}

func (h *heldRuntime) wait(held bool) {
	if held {
		h.once.Do(func() {
			close(h.reached)
			<-h.release
		})
	}
}

func (h *heldRuntime) Create(ctx context.Context, spec workerruntime.Spec) (workerruntime.Handle, error) {
	h.wait(h.holdCreate)
	return h.Runtime.Create(ctx, spec)
}

func (h *heldRuntime) Remove(ctx context.Context, hd workerruntime.Handle, opts workerruntime.RemoveOptions) error {
	err := h.Runtime.Remove(ctx, hd, opts)
	h.wait(h.holdRemove)
	return err
}

// failingRuntime fails its first Remove, having done nothing: an engine
// that would not remove a worker.
type failingRuntime struct {
	workerruntime.Runtime
	failed atomic.Bool
}

func (f *failingRuntime) Remove(ctx context.Context, hd workerruntime.Handle, opts workerruntime.RemoveOptions) error {
	if f.failed.CompareAndSwap(false, true) {
		return errors.New("the engine is not answering")
	}
	return f.Runtime.Remove(ctx, hd, opts)
}

// A stop_worker with workspace archive that fails after the archive is
// written (the worker would not go) leaves no archive behind: its caller
// was told of none, and each retry writes the workspace again.
func TestAFailedArchivingStopLeavesNoArchive(t *testing.T) {
	t.Parallel()
	f := &failingRuntime{}
	b := setupWith(t, 0, 0, func(rt workerruntime.Runtime) workerruntime.Runtime { f.Runtime = rt; return f })
	b.mustSpawn(t, "alice", "j", "")
	if _, err := b.mgr.Stop(context.Background(), "alice", journeys.StopRequest{JourneyID: "j", Workspace: "archive"}); err == nil {
		t.Fatal("the stop succeeded though the worker was not removed")
	}
	if left, _ := os.ReadDir(b.archives); len(left) != 0 {
		t.Fatalf("the failed stop left %d files in the archive directory, want none", len(left))
	}
	res, err := b.mgr.Stop(context.Background(), "alice", journeys.StopRequest{JourneyID: "j", Workspace: "archive"})
	if err != nil {
		t.Fatalf("stopping again: %v", err)
	}
	if left, _ := os.ReadDir(b.archives); len(left) != 1 || filepath.Join(b.archives, left[0].Name()) != res.Archive {
		t.Errorf("the archive directory holds %v, want only the reported %s", left, res.Archive)
	}
}

// inBackground runs f in a goroutine; its error arrives on the channel.
func inBackground(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// spawnLater and stopLater are a spawn and a stop of alice's journey j, in
// the background.
func (b *quotaBundle) spawnLater(mode string) <-chan error {
	return inBackground(func() error { _, err := b.spawn("alice", "j", mode); return err })
}

func (b *quotaBundle) stopLater(workspace string) <-chan error {
	return inBackground(func() error {
		_, err := b.mgr.Stop(context.Background(), "alice", journeys.StopRequest{JourneyID: "j", Workspace: workspace})
		return err
	})
}

// gone checks that a deleted journey left nothing: no live row, no worker,
// no workspace.
func (b *quotaBundle) gone(t *testing.T) {
	t.Helper()
	if l := b.leftovers(t); l.live != 0 || l.workers != 0 || l.workspaces != 0 {
		t.Fatalf("after the delete: %+v, want no live journey, worker or workspace", l)
	}
	if _, err := b.mgr.State(context.Background(), "alice", "j"); err == nil {
		t.Fatal("the deleted journey is still there")
	}
}

// A stop_worker that arrives while its journey's worker is being created
// waits for the spawn, then stops what it made: the journey does not come
// back as active with a worker running after the caller deleted it.
func TestStopDuringASpawnWaitsForIt(t *testing.T) {
	t.Parallel()
	held, wrap := hold(true, false)
	b := setupWith(t, 0, 0, wrap)
	spawned := b.spawnLater("")
	<-held.reached
	stopped := b.stopLater("delete")
	select {
	case err := <-stopped:
		t.Fatalf("the stop ended (%v) while the spawn was still creating the worker; want it to wait", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(held.release)
	if err := <-spawned; err != nil {
		t.Fatalf("spawn: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	b.gone(t)
}

// A stop_worker that read its journey and removed its worker before a
// resume made a new one goes round again: the resumed worker does not keep
// running under a deleted journey.
func TestStopRacingAResumeStopsTheResumedWorker(t *testing.T) {
	t.Parallel()
	held, wrap := hold(false, true)
	b := setupWith(t, 0, 0, wrap)
	b.mustSpawn(t, "alice", "j", "")
	// The first Remove is the keep-stop's: let it through before holding.
	held.once.Do(func() {})
	b.stop(t, "alice", "j", "keep")
	held.once = sync.Once{}

	stopped := b.stopLater("delete")
	<-held.reached // the delete removed what it read, and has not written its state
	if _, err := b.spawn("alice", "j", "resume"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	close(held.release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	b.gone(t)
}

// A stop_worker that goes round again because another stop deleted its
// journey meanwhile ends there: it does not stop the new journey the
// caller spawned under the same id in between.
func TestStopGoingRoundAgainLeavesANewJourneyUnderItsIDAlone(t *testing.T) {
	t.Parallel()
	held, wrap := hold(false, true)
	b := setupWith(t, 0, 0, wrap)
	b.mustSpawn(t, "alice", "j", "")

	kept := b.stopLater("keep")
	<-held.reached // the keep-stop removed the worker and has not written its state
	// Only the keep-stop's Remove is held: what follows was ordered after
	// its goroutine read holdRemove, through reached.
	held.holdRemove = false
	b.stop(t, "alice", "j", "delete")
	b.mustSpawn(t, "alice", "j", "")
	close(held.release)
	err := <-kept
	if e, ok := journeys.AsError(err); !ok || e.Code != journeys.CodeNotFound || !strings.Contains(e.Message, "deleted by another stop_worker") {
		t.Fatalf("the keep-stop: %v, want not_found saying another stop deleted the journey", err)
	}
	if st, err := b.mgr.State(context.Background(), "alice", "j"); err != nil || st.State != "active" {
		t.Fatalf("the new journey j: %+v, %v; want it active", st, err)
	}
	if l := b.leftovers(t); l.workers != 1 {
		t.Fatalf("%+v: want the new journey's worker running", l)
	}
}

// get_worker_state while a resume creates the worker reports the journey
// starting, and leaves the spawn alone: the journey still has its old
// worker's id then, which the runtime no longer knows.
func TestStateDuringAResumeLeavesItAlone(t *testing.T) {
	t.Parallel()
	held, wrap := hold(false, false)
	b := setupWith(t, 0, 0, wrap)
	b.mustSpawn(t, "alice", "j", "")
	b.stop(t, "alice", "j", "keep")
	held.holdCreate = true
	spawned := b.spawnLater("resume")
	<-held.reached
	st, err := b.mgr.State(context.Background(), "alice", "j")
	if err != nil || st.State != "starting" {
		t.Errorf("state during the resume: %+v, %v; want starting", st, err)
	}
	close(held.release)
	if err := <-spawned; err != nil {
		t.Fatalf("resume: %v", err)
	}
	if st, err := b.mgr.State(context.Background(), "alice", "j"); err != nil || st.State != "active" {
		t.Fatalf("state after the resume: %+v, %v; want active", st, err)
	}
	if l := b.leftovers(t); l.workers != 1 {
		t.Fatalf("%+v: want the resumed worker", l)
	}
}

// A spawn whose journey was stopped while its worker was created (by a
// writer that did not wait for it) removes the worker it made, and says so.
func TestASpawnGivesWayToAStopThatCameFirst(t *testing.T) {
	t.Parallel()
	held, wrap := hold(true, false)
	b := setupWith(t, 0, 0, wrap)
	spawned := b.spawnLater("")
	<-held.reached
	if _, err := b.pool.Exec(context.Background(), `UPDATE journeys SET state = 'deleted' WHERE caller = 'alice' AND id = 'j'`); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	err := <-spawned
	if e, ok := journeys.AsError(err); !ok || e.Code != journeys.CodeConflict || !strings.Contains(e.Message, "was deleted") {
		t.Fatalf("spawn: %v, want a conflict saying the journey was deleted", err)
	}
	b.gone(t)
}
