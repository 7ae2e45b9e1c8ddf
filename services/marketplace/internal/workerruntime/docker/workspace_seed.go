package docker

import (
	"context"
	"fmt"
	"io"

	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// SeedWorkspace implements workerruntime.Runtime through the engine's copy into a
// container: the engine unpacks the tar into the workspace volume, with the
// owners its headers name (the worker's user), also when the container's
// root filesystem is read-only.
func (r *Runtime) SeedWorkspace(ctx context.Context, h workerruntime.Handle, tar io.Reader) error {
	if h.ID == "" {
		return fmt.Errorf("seeding workspace: no container: %w", workerruntime.ErrNotFound)
	}
	if _, err := r.engine.CopyToContainer(ctx, h.ID, client.CopyToContainerOptions{DestinationPath: workerruntime.WorkspacePath, Content: tar}); err != nil {
		return fmt.Errorf("seeding the workspace of container %s: %w", h.ID, notFound(err))
	}
	return nil
}
