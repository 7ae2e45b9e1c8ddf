package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// ExportWorkspace implements workerruntime.Runtime. It reads the workspace through
// the worker's container, running or stopped. When the container is gone (a
// journey stopped with its workspace kept) it mounts the volume, read-only,
// in a helper container that is created but never started, and removes it.
// A container that a stop removes as the export begins is waited for, and
// then gone.
func (r *Runtime) ExportWorkspace(ctx context.Context, h workerruntime.Handle, w io.Writer) error {
	if h.ID != "" {
		opened, err := r.copyWorkspace(ctx, h.ID, w)
		if opened {
			// A removal as the engine streams the archive ends it early,
			// with no error when the cut falls between two files: a
			// container removed meanwhile makes the read suspect.
			if r.removedMeanwhile(ctx, h.ID) {
				return fmt.Errorf("exporting workspace of container %s: %w", h.ID, workerruntime.ErrReadCut)
			}
			return err
		}
		// Stops do not wait for exports. A container being removed is
		// refused by the engine with an error of its own or of its storage
		// driver's (fuse-overlayfs: "returning inconsistent paths"), not as
		// not found: nothing is written yet, and once it is gone its
		// workspace is read from the volume.
		if !errors.Is(err, workerruntime.ErrNotFound) && !r.removedMeanwhile(ctx, h.ID) {
			return err
		}
	}
	if h.Workspace == "" {
		return fmt.Errorf("exporting workspace: no container and no volume: %w", workerruntime.ErrNotFound)
	}
	vol, err := r.engine.VolumeInspect(ctx, h.Workspace, client.VolumeInspectOptions{})
	if err != nil {
		return fmt.Errorf("exporting workspace: inspecting volume %s: %w", h.Workspace, notFound(err))
	}
	if vol.Volume.Labels[workerruntime.LabelJourney] == "" {
		return fmt.Errorf("exporting workspace: volume %s is not a workspace (no %s label)", h.Workspace, workerruntime.LabelJourney)
	}
	image := vol.Volume.Labels[LabelImage]
	if image == "" {
		return fmt.Errorf("exporting workspace: volume %s has no %s label: %w", h.Workspace, LabelImage, errNoImage)
	}
	created, err := r.engine.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:           image,
			User:            DefaultUser,
			Labels:          helperLabels(vol.Volume.Labels, "export"),
			NetworkDisabled: true,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: "none",
			CapDrop:     []string{"ALL"},
			SecurityOpt: securityOpt,
			Mounts: []mount.Mount{{
				Type: mount.TypeVolume, Source: h.Workspace, Target: workerruntime.WorkspacePath, ReadOnly: true,
				// NoCopy: an empty workspace must stay empty, not receive
				// the helper image's /workspace.
				VolumeOptions: &mount.VolumeOptions{NoCopy: true},
			}},
		},
	})
	if err != nil {
		return fmt.Errorf("exporting workspace: creating a helper container from %s: %w", image, err)
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := r.engine.ContainerRemove(ctx, created.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			r.logger.WarnContext(ctx, "removing the export helper container failed", slog.String("container", created.ID), slog.Any("error", err))
		}
	}()
	_, err = r.copyWorkspace(ctx, created.ID, w)
	return err
}

// copyWorkspace writes the tar of a container's /workspace, with names
// relative to the workspace; opened says whether the engine began the
// archive (and so whether anything may have been written). The archive is
// closed when it returns: the engine holds the container while it is
// unread.
func (r *Runtime) copyWorkspace(ctx context.Context, id string, w io.Writer) (opened bool, err error) {
	res, err := r.engine.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: workerruntime.WorkspacePath + "/."})
	if err != nil {
		return false, fmt.Errorf("exporting workspace of container %s: %w", id, notFound(err))
	}
	defer res.Content.Close()
	if err := rebaseTar(res.Content, w); err != nil {
		return true, fmt.Errorf("exporting workspace of container %s: %w", id, err)
	}
	return true, nil
}

// removedMeanwhile reports whether container id is gone, waiting (for
// removalWait at most) for a removal under way to end: a stop removing it
// as an export began.
func (r *Runtime) removedMeanwhile(ctx context.Context, id string) bool {
	res, err := r.engine.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		return true
	case err != nil || res.Container.State == nil || res.Container.State.Status != container.StateRemoving:
		return false
	}
	gone, _, _ := r.awaitRemoval(ctx, id)
	return gone
}

// rebaseTar copies a tar stream, making names relative to its root directory:
// the engine prefixes every entry with "./" (for "/workspace/.") or
// "workspace/" (for "/workspace"), and an archive of a workspace should hold
// its contents, not a directory. The root entry itself is dropped.
func rebaseTar(r io.Reader, w io.Writer) error {
	tr := tar.NewReader(bufio.NewReaderSize(r, 64<<10))
	tw := tar.NewWriter(w)
	prefix := ""
	first := true
	// One buffer for every file: io.Copy would make one per file, as the
	// tar reader and writer offer it no shortcut (5,000 files: 160 MB).
	buf := make([]byte, 32<<10)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the engine's archive: %w", err)
		}
		if first {
			first = false
			// The first entry is the directory copied: it names the prefix.
			if hdr.Typeflag == tar.TypeDir {
				prefix = strings.TrimSuffix(hdr.Name, "/") + "/"
				continue
			}
		}
		name, ok := strings.CutPrefix(hdr.Name, prefix)
		if !ok || name == "" {
			return fmt.Errorf("unexpected entry %q outside %q in the engine's archive", hdr.Name, prefix)
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeLink {
			// Hard links name another entry of the archive.
			hdr.Linkname = strings.TrimPrefix(hdr.Linkname, prefix)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		if _, err := io.CopyBuffer(tw, tr, buf); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finishing the archive: %w", err)
	}
	return nil
}

// helperLabels are the labels of a short-lived container working on vol:
// the volume's own (so test labels carry over) minus the ones that would
// make it look like a worker.
func helperLabels(volLabels map[string]string, purpose string) map[string]string {
	l := maps.Clone(volLabels)
	if l == nil {
		l = map[string]string{}
	}
	delete(l, workerruntime.LabelJourney)
	delete(l, workerruntime.LabelWorker)
	delete(l, LabelImage)
	l[labelHelper] = purpose
	return l
}

var errNoImage = errors.New("no image to mount the workspace with")
