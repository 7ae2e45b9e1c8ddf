package docker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker"
)

// removingEngine is a Docker engine (a narrow fake of the three calls a
// removal makes) on which another call is removing the worker's container:
// the runtime's first ContainerRemove is refused as the engine refuses it
// then (409, "removal already in progress"); the other removal ends as
// the test says when waited for.
type removingEngine struct {
	docker.EngineClient // nil: any other call fails the test with a panic

	mu      sync.Mutex
	gone    bool
	removes int
	// otherFails: the other removal ends with this error, leaving the
	// container; waitNotFound: it ended before the wait began.
	otherFails   string
	waitNotFound bool
}

func (e *removingEngine) ContainerInspect(context.Context, string, client.ContainerInspectOptions) (client.ContainerInspectResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return client.ContainerInspectResult{}, fmt.Errorf("no such container: %w", cerrdefs.ErrNotFound)
	}
	return client.ContainerInspectResult{Container: container.InspectResponse{Config: &container.Config{Labels: map[string]string{workerruntime.LabelJourney: "j"}}}}, nil
}

func (e *removingEngine) ContainerRemove(context.Context, string, client.ContainerRemoveOptions) (client.ContainerRemoveResult, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removes++
	if e.removes == 1 {
		return client.ContainerRemoveResult{}, fmt.Errorf("removal of container c1 is already in progress: %w", cerrdefs.ErrConflict)
	}
	e.gone = true
	return client.ContainerRemoveResult{}, nil
}

func (e *removingEngine) ContainerWait(_ context.Context, _ string, opts client.ContainerWaitOptions) client.ContainerWaitResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	results, errs := make(chan container.WaitResponse, 1), make(chan error, 1)
	switch {
	case opts.Condition != container.WaitConditionRemoved:
		errs <- fmt.Errorf("waited for %q, not for the removal", opts.Condition)
	case e.waitNotFound:
		e.gone = true
		errs <- fmt.Errorf("no such container: %w", cerrdefs.ErrNotFound)
	case e.otherFails != "":
		results <- container.WaitResponse{Error: &container.WaitExitError{Message: e.otherFails}}
	default:
		e.gone = true
		results <- container.WaitResponse{}
	}
	return client.ContainerWaitResult{Result: results, Error: errs}
}

// A removal that finds another under way waits for it, and makes sure the
// container is gone: done when the other one removed it, tried once more
// when the other one failed.
func TestRemoveWaitsForARemovalUnderWay(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		engine      *removingEngine
		wantRemoves int
	}{
		{"the other removal succeeds", &removingEngine{}, 1},
		{"it ended before the wait", &removingEngine{waitNotFound: true}, 1},
		{"it failed", &removingEngine{otherFails: "driver failed to remove the root filesystem"}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := docker.New(tt.engine, nil)
			if err := rt.Remove(t.Context(), workerruntime.Handle{ID: "c1"}, workerruntime.RemoveOptions{}); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if !tt.engine.gone || tt.engine.removes != tt.wantRemoves {
				t.Errorf("gone %v after %d removes; want gone after %d", tt.engine.gone, tt.engine.removes, tt.wantRemoves)
			}
		})
	}
}
