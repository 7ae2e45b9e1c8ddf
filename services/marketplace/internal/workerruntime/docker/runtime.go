// Package docker runs workers as hardened containers through the Docker
// Engine API: one container ("meshwork-<journey>") and one named volume
// ("meshwork-ws-<journey>", mounted at /workspace) per journey, both labelled
// so that reconciliation finds them.
//
// The container drops every capability, forbids privilege escalation, runs
// under an init as a non-root user, with no network unless asked for bridge,
// CPU, memory (without swap) and pids limits, and no bind mounts or
// published ports. The runtime never pulls: images must be present locally.
package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/meshwork/meshwork/pkg/tailbuf"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// EngineClient is the part of the Docker Engine client the runtime uses;
// *client.Client satisfies it.
type EngineClient interface {
	ContainerCreate(ctx context.Context, options client.ContainerCreateOptions) (client.ContainerCreateResult, error)
	ContainerStart(ctx context.Context, containerID string, options client.ContainerStartOptions) (client.ContainerStartResult, error)
	ContainerStop(ctx context.Context, containerID string, options client.ContainerStopOptions) (client.ContainerStopResult, error)
	ContainerRemove(ctx context.Context, containerID string, options client.ContainerRemoveOptions) (client.ContainerRemoveResult, error)
	ContainerInspect(ctx context.Context, containerID string, options client.ContainerInspectOptions) (client.ContainerInspectResult, error)
	ContainerWait(ctx context.Context, containerID string, options client.ContainerWaitOptions) client.ContainerWaitResult
	ContainerList(ctx context.Context, options client.ContainerListOptions) (client.ContainerListResult, error)
	ContainerLogs(ctx context.Context, containerID string, options client.ContainerLogsOptions) (client.ContainerLogsResult, error)
	CopyFromContainer(ctx context.Context, containerID string, options client.CopyFromContainerOptions) (client.CopyFromContainerResult, error)
	CopyToContainer(ctx context.Context, containerID string, options client.CopyToContainerOptions) (client.CopyToContainerResult, error)
	ExecCreate(ctx context.Context, containerID string, options client.ExecCreateOptions) (client.ExecCreateResult, error)
	ExecAttach(ctx context.Context, execID string, options client.ExecAttachOptions) (client.ExecAttachResult, error)
	ExecInspect(ctx context.Context, execID string, options client.ExecInspectOptions) (client.ExecInspectResult, error)
	VolumeCreate(ctx context.Context, options client.VolumeCreateOptions) (client.VolumeCreateResult, error)
	VolumeInspect(ctx context.Context, volumeID string, options client.VolumeInspectOptions) (client.VolumeInspectResult, error)
	VolumeRemove(ctx context.Context, volumeID string, options client.VolumeRemoveOptions) (client.VolumeRemoveResult, error)
	NetworkCreate(ctx context.Context, name string, options client.NetworkCreateOptions) (client.NetworkCreateResult, error)
	NetworkInspect(ctx context.Context, networkID string, options client.NetworkInspectOptions) (client.NetworkInspectResult, error)
	NetworkConnect(ctx context.Context, networkID string, options client.NetworkConnectOptions) (client.NetworkConnectResult, error)
	NetworkList(ctx context.Context, options client.NetworkListOptions) (client.NetworkListResult, error)
	NetworkRemove(ctx context.Context, networkID string, options client.NetworkRemoveOptions) (client.NetworkRemoveResult, error)
}

// Runtime is the Docker implementation of workerruntime.Runtime. It is safe for
// concurrent use; it keeps no state of its own, the engine is the truth.
type Runtime struct {
	engine EngineClient
	logger *slog.Logger
	// owned is closed by Close: set when the runtime made the client.
	owned io.Closer
}

var _ workerruntime.Runtime = (*Runtime)(nil)

// New returns a runtime on an engine client the caller owns. A nil logger
// discards logs.
func New(engine EngineClient, logger *slog.Logger) *Runtime {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Runtime{engine: engine, logger: logger.With(slog.String("runtime", "docker"))}
}

// NewFromEnv connects to the engine the standard environment names
// (DOCKER_HOST, DOCKER_API_VERSION, DOCKER_CERT_PATH, DOCKER_TLS_VERIFY; the
// local socket by default), checks that it answers, and returns a runtime
// that owns the client: call Close when done.
func NewFromEnv(ctx context.Context, logger *slog.Logger) (*Runtime, error) {
	c, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("creating the Docker client: %w", err)
	}
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reaching the Docker engine: %w", err)
	}
	r := New(c, logger)
	r.owned = c
	return r, nil
}

// Close releases the client if NewFromEnv made it; workers keep running.
func (r *Runtime) Close() error {
	if r.owned == nil {
		return nil
	}
	return r.owned.Close()
}

// Name implements workerruntime.Runtime.
func (r *Runtime) Name() string { return "docker" }

// Create implements workerruntime.Runtime: it reuses or creates the journey's
// volume, creates a hardened container (replacing one left under the
// journey's name) and starts it. Callers serialize the Creates of one
// journey (the manager's journey lock): a second one would replace the
// first's container.
func (r *Runtime) Create(ctx context.Context, spec workerruntime.Spec) (workerruntime.Handle, error) {
	spec, err := withDefaults(spec)
	if err != nil {
		return workerruntime.Handle{}, err
	}
	log := r.logger.With(slog.String("journey", spec.Journey), slog.String("worker", spec.Worker))
	name, vol := containerName(spec.Journey), VolumeName(spec.Journey)

	createdVolume, err := r.ensureVolume(ctx, vol, spec)
	if err != nil {
		return workerruntime.Handle{}, err
	}
	// Undo what this call made if a later step fails; a reused volume holds
	// a resumed journey's files and is never removed here.
	cleanup := func(id string) {
		ctx := context.WithoutCancel(ctx)
		if id != "" {
			if _, err := r.engine.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
				log.WarnContext(ctx, "removing a half-created container failed", slog.String("container", id), slog.Any("error", err))
			}
		}
		if createdVolume {
			if _, err := r.engine.VolumeRemove(ctx, vol, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				log.WarnContext(ctx, "removing a half-created volume failed", slog.String("volume", vol), slog.Any("error", err))
			}
		}
	}

	cfg, hostCfg := containerConfig(spec, vol)
	opts := client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hostCfg}
	created, err := r.engine.ContainerCreate(ctx, opts)
	if cerrdefs.IsConflict(err) {
		// The name is taken: by a container from an earlier life of the
		// journey (a crash, or a create that failed half-way), which is
		// stale, or by someone else's, which is refused. Asking first would
		// cost every spawn an engine call for this rare case.
		if err := r.removeStale(ctx, name, spec.Journey); err != nil {
			cleanup("")
			return workerruntime.Handle{}, err
		}
		created, err = r.engine.ContainerCreate(ctx, opts)
	}
	if err != nil {
		cleanup("")
		if cerrdefs.IsNotFound(err) {
			return workerruntime.Handle{}, fmt.Errorf("creating container %s: image %q is not present locally (this runtime never pulls): %w", name, spec.Image, err)
		}
		return workerruntime.Handle{}, fmt.Errorf("creating container %s: %w", name, err)
	}
	for _, w := range created.Warnings {
		log.WarnContext(ctx, "engine warning on container create", slog.String("container", created.ID), slog.String("warning", w))
	}
	if _, err := r.engine.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		cleanup(created.ID)
		return workerruntime.Handle{}, fmt.Errorf("starting container %s: %w", name, err)
	}
	log.InfoContext(ctx, "worker container started", slog.String("container", created.ID), slog.String("volume", vol), slog.Bool("volume_created", createdVolume))
	return workerruntime.Handle{ID: created.ID, Workspace: vol}, nil
}

// removeStale force-removes the container named name, if there is one and it
// is the journey's; one that is not the journey's is an error.
func (r *Runtime) removeStale(ctx context.Context, name, journey string) error {
	res, err := r.engine.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspecting container %s: %w", name, err)
	}
	if got := containerLabels(res.Container)[workerruntime.LabelJourney]; got != journey {
		// Not ours: removing it could destroy someone else's work.
		return fmt.Errorf("container %s exists but is not journey %s's (label %s=%q); remove it by hand", name, journey, workerruntime.LabelJourney, got)
	}
	r.logger.InfoContext(ctx, "removing stale worker container", slog.String("journey", journey), slog.String("container", res.Container.ID))
	if _, err := r.engine.ContainerRemove(ctx, res.Container.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing stale container %s: %w", name, err)
	}
	return nil
}

// ensureVolume creates the workspace volume or reuses the existing one
// (that is how a resumed journey keeps its files). It reports whether it
// created it.
func (r *Runtime) ensureVolume(ctx context.Context, vol string, spec workerruntime.Spec) (bool, error) {
	res, err := r.engine.VolumeInspect(ctx, vol, client.VolumeInspectOptions{})
	if err == nil {
		if got := res.Volume.Labels[workerruntime.LabelJourney]; got != spec.Journey {
			return false, fmt.Errorf("volume %s exists but is not journey %s's (label %s=%q); remove it by hand", vol, spec.Journey, workerruntime.LabelJourney, got)
		}
		return false, nil
	}
	if !cerrdefs.IsNotFound(err) {
		return false, fmt.Errorf("inspecting volume %s: %w", vol, err)
	}
	l := labels(spec)
	l[LabelImage] = spec.Image
	if _, err := r.engine.VolumeCreate(ctx, client.VolumeCreateOptions{Name: vol, Labels: l}); err != nil {
		return false, fmt.Errorf("creating volume %s: %w", vol, err)
	}
	return true, nil
}

// Start implements workerruntime.Runtime.
func (r *Runtime) Start(ctx context.Context, h workerruntime.Handle) error {
	if h.ID == "" {
		return fmt.Errorf("starting worker: no container: %w", workerruntime.ErrNotFound)
	}
	if _, err := r.engine.ContainerStart(ctx, h.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("starting container %s: %w", h.ID, notFound(err))
	}
	return nil
}

// Stop implements workerruntime.Runtime: the engine sends the image's stop signal
// (SIGTERM) and kills after grace, rounded up to whole seconds.
func (r *Runtime) Stop(ctx context.Context, h workerruntime.Handle, grace time.Duration) error {
	if h.ID == "" {
		return fmt.Errorf("stopping worker: no container: %w", workerruntime.ErrNotFound)
	}
	secs := max(0, int(math.Ceil(grace.Seconds())))
	if _, err := r.engine.ContainerStop(ctx, h.ID, client.ContainerStopOptions{Timeout: &secs}); err != nil {
		return fmt.Errorf("stopping container %s: %w", h.ID, notFound(err))
	}
	return nil
}

// Remove implements workerruntime.Runtime. It refuses to delete a container or a
// volume that does not carry LabelJourney: handles come from the database
// and a wrong one must not destroy something that is not a worker's.
func (r *Runtime) Remove(ctx context.Context, h workerruntime.Handle, opts workerruntime.RemoveOptions) error {
	if h.ID != "" {
		res, err := r.engine.ContainerInspect(ctx, h.ID, client.ContainerInspectOptions{})
		switch {
		case cerrdefs.IsNotFound(err):
		case err != nil:
			return fmt.Errorf("inspecting container %s: %w", h.ID, err)
		case containerLabels(res.Container)[workerruntime.LabelJourney] == "":
			return fmt.Errorf("container %s is not a worker (no %s label); not removing it", h.ID, workerruntime.LabelJourney)
		default:
			_, err := r.engine.ContainerRemove(ctx, h.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if cerrdefs.IsConflict(err) {
				// Another stop of the journey is removing it (a stop is
				// not under the journey's lock, so that it can end an
				// action): done once that removal is.
				err = r.waitRemoved(ctx, h.ID)
			}
			if err != nil && !cerrdefs.IsNotFound(err) {
				return fmt.Errorf("removing container %s: %w", h.ID, err)
			}
		}
	}
	if !opts.Workspace || h.Workspace == "" {
		return nil
	}
	res, err := r.engine.VolumeInspect(ctx, h.Workspace, client.VolumeInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspecting volume %s: %w", h.Workspace, err)
	}
	if res.Volume.Labels[workerruntime.LabelJourney] == "" {
		return fmt.Errorf("volume %s is not a workspace (no %s label); not removing it", h.Workspace, workerruntime.LabelJourney)
	}
	if _, err := r.engine.VolumeRemove(ctx, h.Workspace, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("removing volume %s: %w", h.Workspace, err)
	}
	return nil
}

// removalWait bounds the wait for a container another call is removing.
const removalWait = time.Minute

// waitRemoved waits, for at most removalWait, until another call's removal
// of the container is over, and then makes sure it is gone: a removal that
// failed (the engine wakes its waiters with the error, or not at all) is
// tried once more here.
func (r *Runtime) waitRemoved(ctx context.Context, id string) error {
	gone, other, err := r.awaitRemoval(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("inspecting it after another removal (%s): %w", other, err)
	case gone:
		return nil
	}
	if _, err := r.engine.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("another removal did not remove it (%s), nor did this one: %w", other, err)
	}
	return nil
}

// awaitRemoval waits, for at most removalWait, until another call's
// removal of container id is over, and reports whether the container is
// gone; other is what became of that removal, as the engine said.
func (r *Runtime) awaitRemoval(ctx context.Context, id string) (gone bool, other string, err error) {
	wctx, cancel := context.WithTimeout(ctx, removalWait)
	defer cancel()
	wait := r.engine.ContainerWait(wctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionRemoved})
	other = "it said nothing"
	select {
	case res := <-wait.Result:
		if res.Error != nil && res.Error.Message != "" {
			other = res.Error.Message
		}
	case err := <-wait.Error:
		if cerrdefs.IsNotFound(err) {
			return true, "", nil
		}
		other = err.Error()
	}
	_, err = r.engine.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return true, other, nil
	}
	return false, other, err
}

// State implements workerruntime.Runtime. A paused or restarting container counts
// as stopped: nothing can be exec'd in it.
func (r *Runtime) State(ctx context.Context, h workerruntime.Handle) (workerruntime.State, error) {
	s, err := r.inspectState(ctx, h)
	switch {
	case err != nil:
		return "", err
	case s == nil:
		return workerruntime.StateMissing, nil
	case s.Running && !s.Paused && !s.Restarting:
		return workerruntime.StateRunning, nil
	}
	return workerruntime.StateStopped, nil
}

// inspectState is the state of h's container; nil when there is none.
func (r *Runtime) inspectState(ctx context.Context, h workerruntime.Handle) (*container.State, error) {
	if h.ID == "" {
		return nil, nil
	}
	res, err := r.engine.ContainerInspect(ctx, h.ID, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspecting container %s: %w", h.ID, err)
	}
	if res.Container.State == nil {
		return &container.State{}, nil // stopped, as far as anyone can say
	}
	return res.Container.State, nil
}

// Exit implements workerruntime.ExitReporter from the container's state.
func (r *Runtime) Exit(ctx context.Context, h workerruntime.Handle) (workerruntime.Exit, bool, error) {
	s, err := r.inspectState(ctx, h)
	if err == nil && s == nil {
		return workerruntime.Exit{}, false, workerruntime.ErrNotFound
	}
	if err != nil || s.Running || s.Restarting || s.Status == container.StateCreated {
		return workerruntime.Exit{}, false, err
	}
	return workerruntime.Exit{Code: s.ExitCode, OOMKilled: s.OOMKilled, Error: s.Error}, true, nil
}

var _ workerruntime.ExitReporter = (*Runtime)(nil)

// List implements workerruntime.Runtime. Only containers are listed: a workspace
// volume without a container is a stopped journey's, not a worker.
func (r *Runtime) List(ctx context.Context, extra map[string]string) ([]workerruntime.Listed, error) {
	f := client.Filters{}.Add("label", workerruntime.LabelJourney)
	for k, v := range extra {
		f.Add("label", k+"="+v)
	}
	res, err := r.engine.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing worker containers: %w", err)
	}
	out := make([]workerruntime.Listed, 0, len(res.Items))
	for _, c := range res.Items {
		journey := c.Labels[workerruntime.LabelJourney]
		ws := VolumeName(journey)
		for _, m := range c.Mounts {
			if m.Destination == workerruntime.WorkspacePath && m.Name != "" {
				ws = m.Name
			}
		}
		state := workerruntime.StateStopped
		if c.State == container.StateRunning {
			state = workerruntime.StateRunning
		}
		out = append(out, workerruntime.Listed{
			Handle:  workerruntime.Handle{ID: c.ID, Workspace: ws},
			Journey: journey,
			Worker:  c.Labels[workerruntime.LabelWorker],
			State:   state,
		})
	}
	return out, nil
}

// Logs implements workerruntime.Runtime: the main process's stdout and stderr,
// interleaved as the engine stored them. tail <= 0 returns everything.
func (r *Runtime) Logs(ctx context.Context, h workerruntime.Handle, tail int) ([]byte, error) {
	if h.ID == "" {
		return nil, fmt.Errorf("reading logs: no container: %w", workerruntime.ErrNotFound)
	}
	t := "all"
	if tail > 0 {
		t = strconv.Itoa(tail)
	}
	rc, err := r.engine.ContainerLogs(ctx, h.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: t})
	if err != nil {
		return nil, fmt.Errorf("reading logs of container %s: %w", h.ID, notFound(err))
	}
	defer rc.Close()
	// Workers never get a TTY, so the log stream is multiplexed.
	buf := tailbuf.New(workerruntime.MaxLogBytes)
	if _, err := stdcopy.StdCopy(buf, buf, rc); err != nil {
		return nil, fmt.Errorf("reading logs of container %s: %w", h.ID, err)
	}
	out := buf.Lines(0)
	if buf.Cut() {
		// From the start of a line: the first one kept was cut.
		if i := bytes.IndexByte(out, '\n'); i >= 0 {
			out = out[i+1:]
		}
	}
	return out, nil
}

// notFound adds workerruntime.ErrNotFound to an engine "not found" error, so
// callers can branch on it without knowing the engine's error types.
func notFound(err error) error {
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("%w: %w", workerruntime.ErrNotFound, err)
	}
	return err
}

func containerLabels(c container.InspectResponse) map[string]string {
	if c.Config == nil {
		return nil
	}
	return c.Config.Labels
}
