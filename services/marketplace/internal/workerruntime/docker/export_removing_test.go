package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/volume"
	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker"
)

// exportRacingEngine is a Docker engine (a narrow fake of the calls an
// export makes) on which a stop is removing the worker's container c1 as
// the export begins: the copy from c1 is refused with the storage
// driver's error, as fuse-overlayfs refuses it then, and c1 is
// "removing" until waited for. The workspace volume holds notes.md, read
// through a helper container.
type exportRacingEngine struct {
	docker.EngineClient // nil: any other call fails the test with a panic

	mu sync.Mutex
	// removing: c1 is being removed (else it is running, and the copy's
	// error has nothing to do with a removal).
	removing, gone bool
	helperGone     bool
	// cutCopy: the copy from c1 begins, and the stop's removal ends its
	// archive early, between two files: no error, a file missing.
	cutCopy bool
}

func (e *exportRacingEngine) ContainerInspect(_ context.Context, id string, _ client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if id != "c1" || e.gone {
		return client.ContainerInspectResult{}, fmt.Errorf("no such container: %w", cerrdefs.ErrNotFound)
	}
	status := container.StateRunning
	if e.removing {
		status = container.StateRemoving
	}
	return client.ContainerInspectResult{Container: container.InspectResponse{State: &container.State{Status: status}}}, nil
}

func (e *exportRacingEngine) ContainerWait(_ context.Context, _ string, opts client.ContainerWaitOptions) client.ContainerWaitResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	results, errs := make(chan container.WaitResponse, 1), make(chan error, 1)
	if opts.Condition != container.WaitConditionRemoved {
		errs <- fmt.Errorf("waited for %q, not for the removal", opts.Condition)
	} else {
		e.gone = true
		results <- container.WaitResponse{}
	}
	return client.ContainerWaitResult{Result: results, Error: errs}
}

func (e *exportRacingEngine) CopyFromContainer(_ context.Context, id string, _ client.CopyFromContainerOptions) (client.CopyFromContainerResult, error) {
	if id == "c1" && !e.cutCopy {
		return client.CopyFromContainerResult{}, errors.New("Error: driver fuse-overlayfs is returning inconsistent paths for container c1")
	}
	if id == "c1" {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		_ = tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755})
		_ = tw.Flush() // no trailer: the archive ends where the removal cut it
		return client.CopyFromContainerResult{Content: io.NopCloser(&b)}, nil
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755})
	_ = tw.WriteHeader(&tar.Header{Name: "./notes.md", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	_, _ = tw.Write([]byte("hi\n"))
	_ = tw.Close()
	return client.CopyFromContainerResult{Content: io.NopCloser(&b)}, nil
}

func (e *exportRacingEngine) VolumeInspect(_ context.Context, name string, _ client.VolumeInspectOptions) (client.VolumeInspectResult, error) {
	return client.VolumeInspectResult{Volume: volume.Volume{Name: name, Labels: map[string]string{workerruntime.LabelJourney: "j", docker.LabelImage: "worker:test"}}}, nil
}

func (e *exportRacingEngine) ContainerCreate(context.Context, client.ContainerCreateOptions) (client.ContainerCreateResult, error) {
	return client.ContainerCreateResult{ID: "helper"}, nil
}

func (e *exportRacingEngine) ContainerRemove(_ context.Context, id string, _ client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if id != "helper" {
		return client.ContainerRemoveResult{}, fmt.Errorf("the export removed %s, not its helper", id)
	}
	e.helperGone = true
	return client.ContainerRemoveResult{}, nil
}

// An export that meets a stop removing its worker's container waits for
// the removal and reads the workspace from its volume, as for a stopped
// journey; one that a removal cut short says so (ErrReadCut); the same
// error from a container that no stop removes is the export's.
func TestExportWhileAStopRemovesTheContainer(t *testing.T) {
	t.Parallel()
	h := workerruntime.Handle{ID: "c1", Workspace: "ws1"}

	e := &exportRacingEngine{removing: true}
	var out bytes.Buffer
	if err := docker.New(e, nil).ExportWorkspace(t.Context(), h, &out); err != nil {
		t.Fatalf("the export: %v", err)
	}
	hdr, err := tar.NewReader(&out).Next()
	if err != nil || hdr.Name != "notes.md" || !e.gone || !e.helperGone {
		t.Errorf("the export's first entry %+v (%v); c1 gone %v, helper removed %v: want notes.md read from the volume once c1 was gone", hdr, err, e.gone, e.helperGone)
	}

	// A copy that a removal cut short, with no error, is said to be cut:
	// the caller reads again, without the container.
	cut := &exportRacingEngine{removing: true, cutCopy: true}
	if err := docker.New(cut, nil).ExportWorkspace(t.Context(), h, io.Discard); !errors.Is(err, workerruntime.ErrReadCut) {
		t.Errorf("a copy cut by a removal: %v, want ErrReadCut", err)
	}
	// A copy from a container nothing removes is taken as it is.
	whole := &exportRacingEngine{cutCopy: true}
	if err := docker.New(whole, nil).ExportWorkspace(t.Context(), h, io.Discard); err != nil {
		t.Errorf("a copy from a running container: %v", err)
	}

	running := &exportRacingEngine{}
	err = docker.New(running, nil).ExportWorkspace(t.Context(), h, io.Discard)
	if err == nil || errors.Is(err, workerruntime.ErrNotFound) || running.helperGone {
		t.Errorf("the export from a running container the engine refused: %v (helper used %v); want the engine's error", err, running.helperGone)
	}
}
