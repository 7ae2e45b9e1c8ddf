package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/google/uuid"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker/seccomp"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/runtimetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const workerImage = "meshwork/worker:latest"

// probeName is where the tests put the probe: in the workspace volume, the
// one place a worker built FROM scratch can be given a binary.
const probeName = ".meshwork-probe"

// engine returns a client of the local engine, or skips the test when there
// is no engine or no worker image.
func engine(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatalf("creating the Docker client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		t.Skipf("no Docker engine: %v", err)
	}
	if _, err := c.ImageInspect(ctx, workerImage); err != nil {
		t.Skipf("image %s is missing (%v): build it with `make offline-images` (or `make build && make images BASE=scratch`); tests never pull", workerImage, err)
	}
	return c
}

func newRuntime(t *testing.T, c *client.Client) *docker.Runtime {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return docker.New(c, logger)
}

// testLabels labels one test's containers and volumes, and removes whatever
// carries them when the test ends, even if it failed half-way.
func testLabels(t *testing.T, c *client.Client) map[string]string {
	t.Helper()
	value := "docker-" + uuid.NewString()[:8]
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		f := client.Filters{}.Add("label", runtimetest.LabelTest+"="+value)
		cs, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
		if err != nil {
			t.Errorf("cleanup: listing containers: %v", err)
		}
		for _, ctr := range cs.Items {
			t.Logf("cleanup: removing leftover container %s %v", ctr.ID, ctr.Names)
			if _, err := c.ContainerRemove(ctx, ctr.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("cleanup: removing container %s: %v", ctr.ID, err)
			}
		}
		vs, err := c.VolumeList(ctx, client.VolumeListOptions{Filters: f})
		if err != nil {
			t.Errorf("cleanup: listing volumes: %v", err)
		}
		for _, v := range vs.Items {
			t.Logf("cleanup: removing leftover volume %s", v.Name)
			if _, err := c.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("cleanup: removing volume %s: %v", v.Name, err)
			}
		}
	})
	return map[string]string{runtimetest.LabelTest: value}
}

// probeInstaller copies the probe into a worker's workspace (once per
// container) and returns its path there.
type probeInstaller struct {
	c    *client.Client
	bin  []byte
	mu   sync.Mutex
	done map[string]bool
}

func newProbeInstaller(t *testing.T, c *client.Client) *probeInstaller {
	t.Helper()
	bin, err := os.ReadFile(runtimetest.BuildProbe(t))
	if err != nil {
		t.Fatal(err)
	}
	return &probeInstaller{c: c, bin: bin, done: map[string]bool{}}
}

func (p *probeInstaller) install(t *testing.T, _ workerruntime.Runtime, h workerruntime.Handle) string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done[h.ID] {
		// Copied as root-owned 0755: the engine cannot map ownership in an
		// image without /etc/passwd, and the worker only needs to run it.
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		hdr := &tar.Header{Name: probeName, Mode: 0o755, Size: int64(len(p.bin)), ModTime: time.Now()}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(p.bin); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.c.CopyToContainer(t.Context(), h.ID, client.CopyToContainerOptions{
			DestinationPath: workerruntime.WorkspacePath, Content: &buf,
		}); err != nil {
			t.Fatalf("copying the probe into %s: %v", h.ID, err)
		}
		p.done[h.ID] = true
	}
	return workerruntime.WorkspacePath + "/" + probeName
}

func TestConformance(t *testing.T) { conformance(t, "") }

// TestConformanceUnderGVisor is the same suite with every worker under
// gVisor (isolation.runtime: runsc).
func TestConformanceUnderGVisor(t *testing.T) {
	runtimetest.RequireGVisor(t)
	conformance(t, "runsc")
}

// conformance runs the runtime suite under an OCI runtime ("" for the
// engine's default).
func conformance(t *testing.T, ociRuntime string) {
	t.Helper()
	c := engine(t)
	labels := testLabels(t, c)
	probe := newProbeInstaller(t, c)
	runtimetest.Exercise(t, func(t *testing.T) workerruntime.Runtime {
		t.Helper()
		return newRuntime(t, c)
	}, runtimetest.Options{
		Image:        workerImage,
		Probe:        probe.install,
		EnforcesUser: true,
		Labels:       labels,
		OCIRuntime:   ociRuntime,
		OwnInit:      true,
	})
}

type bundle struct {
	c      *client.Client
	rt     *docker.Runtime
	labels map[string]string
	probe  *probeInstaller
}

func setup(t *testing.T) *bundle {
	t.Helper()
	t.Parallel()
	c := engine(t)
	return &bundle{c: c, rt: newRuntime(t, c), labels: testLabels(t, c)}
}

func (b *bundle) spec() workerruntime.Spec {
	return workerruntime.Spec{
		Journey:        uuid.NewString(),
		Worker:         "docker_test_v1",
		Image:          workerImage,
		Cmd:            []string{"idle"},
		User:           "65532:65532",
		Network:        "none",
		ReadonlyRootfs: true,
		CPUs:           0.5,
		MemoryBytes:    256 << 20,
		PIDs:           128,
		Labels:         b.labels,
	}
}

func (b *bundle) create(t *testing.T, spec workerruntime.Spec) workerruntime.Handle {
	t.Helper()
	h, err := b.rt.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := b.rt.Remove(context.WithoutCancel(t.Context()), h, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return h
}

func (b *bundle) inspect(t *testing.T, id string) container.InspectResponse {
	t.Helper()
	res, err := b.c.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspecting %s: %v", id, err)
	}
	return res.Container
}

func TestContainerIsHardened(t *testing.T) {
	b := setup(t)
	spec := b.spec()
	spec.OCIRuntime = "runc"
	spec.Env = []string{"MESHWORK_TEST=1"}
	spec.KeepStdinOpen = true
	spec.Init = true
	h := b.create(t, spec)
	ctr := b.inspect(t, h.ID)
	hc, cfg := ctr.HostConfig, ctr.Config

	if ctr.Name != "/meshwork-"+spec.Journey {
		t.Errorf("name %q, want /meshwork-%s", ctr.Name, spec.Journey)
	}
	if hc.Init == nil || !*hc.Init {
		t.Error("Init is not set")
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || len(hc.CapAdd) != 0 {
		t.Errorf("CapDrop %v, CapAdd %v; want [ALL] and none", hc.CapDrop, hc.CapAdd)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("SecurityOpt %v lacks no-new-privileges:true", hc.SecurityOpt)
	}
	if !slices.Contains(hc.SecurityOpt, "seccomp="+seccomp.Profile) {
		t.Error("SecurityOpt lacks the worker seccomp profile")
	}
	if !hc.ReadonlyRootfs {
		t.Error("root filesystem is writable")
	}
	if got := hc.Tmpfs["/tmp"]; got != "rw,nosuid,nodev,size=64m" {
		t.Errorf("tmpfs /tmp options %q", got)
	}
	if cfg.User != "65532:65532" {
		t.Errorf("user %q", cfg.User)
	}
	if hc.NetworkMode != "none" {
		t.Errorf("network mode %q, want none", hc.NetworkMode)
	}
	if hc.Runtime != "runc" {
		t.Errorf("OCI runtime %q, want runc", hc.Runtime)
	}
	if hc.NanoCPUs != 500_000_000 || hc.Memory != 256<<20 || hc.MemorySwap != hc.Memory || hc.PidsLimit == nil || *hc.PidsLimit != 128 {
		t.Errorf("limits: NanoCPUs %d, Memory %d, MemorySwap %d, PidsLimit %v", hc.NanoCPUs, hc.Memory, hc.MemorySwap, hc.PidsLimit)
	}
	if hc.Privileged || hc.PublishAllPorts || len(hc.PortBindings) != 0 || len(hc.Binds) != 0 || len(hc.Devices) != 0 {
		t.Errorf("privileged %v, publish-all %v, ports %v, binds %v, devices %v", hc.Privileged, hc.PublishAllPorts, hc.PortBindings, hc.Binds, hc.Devices)
	}
	for what, mode := range map[string]string{"pid": string(hc.PidMode), "ipc": string(hc.IpcMode), "uts": string(hc.UTSMode), "userns": string(hc.UsernsMode), "cgroupns": string(hc.CgroupnsMode)} {
		if mode == "host" {
			t.Errorf("%s namespace is the host's", what)
		}
	}
	if cfg.WorkingDir != workerruntime.WorkspacePath {
		t.Errorf("working dir %q", cfg.WorkingDir)
	}
	if !slices.Equal(cfg.Cmd, []string{"idle"}) || !slices.Contains(cfg.Env, "MESHWORK_TEST=1") {
		t.Errorf("cmd %v, env %v", cfg.Cmd, cfg.Env)
	}
	if !cfg.OpenStdin || cfg.StdinOnce || cfg.AttachStdin || cfg.Tty {
		t.Errorf("KeepStdinOpen: OpenStdin %v, StdinOnce %v, AttachStdin %v, Tty %v; want an open, unattached stdin and no TTY", cfg.OpenStdin, cfg.StdinOnce, cfg.AttachStdin, cfg.Tty)
	}
	wantLabels := map[string]string{workerruntime.LabelJourney: spec.Journey, workerruntime.LabelWorker: spec.Worker, runtimetest.LabelTest: b.labels[runtimetest.LabelTest]}
	for k, v := range wantLabels {
		if cfg.Labels[k] != v {
			t.Errorf("container label %s = %q, want %q", k, cfg.Labels[k], v)
		}
	}

	// Exactly one mount: the journey's volume at /workspace; no bind mounts.
	if len(ctr.Mounts) != 1 {
		t.Fatalf("mounts %+v, want only the workspace volume", ctr.Mounts)
	}
	m := ctr.Mounts[0]
	if m.Type != mount.TypeVolume || m.Name != docker.VolumeName(spec.Journey) || m.Destination != workerruntime.WorkspacePath || !m.RW {
		t.Errorf("mount %+v, want volume %s read-write at /workspace", m, docker.VolumeName(spec.Journey))
	}
	if h.Workspace != m.Name {
		t.Errorf("handle workspace %q, mounted %q", h.Workspace, m.Name)
	}
	vol, err := b.c.VolumeInspect(t.Context(), h.Workspace, client.VolumeInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels[docker.LabelImage] = workerImage
	for k, v := range wantLabels {
		if vol.Volume.Labels[k] != v {
			t.Errorf("volume label %s = %q, want %q", k, vol.Volume.Labels[k], v)
		}
	}
}

func TestDefaultsAreHardened(t *testing.T) {
	b := setup(t)
	spec := b.spec()
	spec.User, spec.Network, spec.CPUs, spec.MemoryBytes, spec.PIDs = "", "", 0, 0, 0
	h := b.create(t, spec)
	ctr := b.inspect(t, h.ID)
	hc := ctr.HostConfig
	if ctr.Config.User != docker.DefaultUser || hc.NetworkMode != docker.DefaultNetwork {
		t.Errorf("user %q, network %q; want %s, %s", ctr.Config.User, hc.NetworkMode, docker.DefaultUser, docker.DefaultNetwork)
	}
	if hc.NanoCPUs != int64(docker.DefaultCPUs*1e9) || hc.Memory != docker.DefaultMemoryBytes || hc.PidsLimit == nil || *hc.PidsLimit != docker.DefaultPIDs {
		t.Errorf("limits: NanoCPUs %d, Memory %d, PidsLimit %v", hc.NanoCPUs, hc.Memory, hc.PidsLimit)
	}
}

func TestNetworkNone(t *testing.T) {
	b := setup(t)
	b.probe = newProbeInstaller(t, b.c)
	h := b.create(t, b.spec())
	ctr := b.inspect(t, h.ID)
	if ctr.HostConfig.NetworkMode != "none" {
		t.Fatalf("network mode %q", ctr.HostConfig.NetworkMode)
	}
	for name, ep := range ctr.NetworkSettings.Networks {
		if name != "none" || ep == nil || ep.IPAddress.IsValid() || ep.Gateway.IsValid() {
			t.Errorf("attached to network %s: %+v", name, ep)
		}
	}

	// From the inside: only loopback, and a dial out fails.
	argv := []string{b.probe.install(t, b.rt, h), "net", "192.0.2.1:80"}
	s, err := b.rt.Exec(t.Context(), h, argv)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.CloseWrite()
	out, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := s.Wait(); err != nil || code != 0 {
		t.Fatalf("probe net: code %d, %v; output %q", code, err, out)
	}
	if !strings.Contains(string(out), "interfaces: lo\n") {
		t.Errorf("the worker sees interfaces other than lo: %q", out)
	}
	if !strings.Contains(string(out), "dial: error:") || !strings.Contains(string(out), "unreachable") {
		t.Errorf("a dial out of the worker did not fail with network unreachable: %q", out)
	}
}

func TestJourneysMountOnlyTheirOwnVolume(t *testing.T) {
	b := setup(t)
	ha := b.create(t, b.spec())
	hb := b.create(t, b.spec())
	for _, pair := range [][2]workerruntime.Handle{{ha, hb}, {hb, ha}} {
		own, other := pair[0], pair[1]
		for _, m := range b.inspect(t, own.ID).Mounts {
			if m.Type == mount.TypeBind {
				t.Errorf("container %s has a bind mount %+v", own.ID, m)
			}
			if m.Name == other.Workspace {
				t.Errorf("container %s mounts the other journey's volume %s", own.ID, other.Workspace)
			}
			if m.Destination == workerruntime.WorkspacePath && m.Name != own.Workspace {
				t.Errorf("container %s mounts %s at /workspace, want %s", own.ID, m.Name, own.Workspace)
			}
		}
	}
}

// waitStopped waits up to a minute for the worker h to stop.
func waitStopped(t *testing.T, rt *docker.Runtime, h workerruntime.Handle) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := rt.State(t.Context(), h)
		if err != nil {
			t.Fatal(err)
		}
		if st == workerruntime.StateStopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker is still %s after a minute", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Exit says how a stopped worker ended, and nothing of a running one.
func TestExitOfAStoppedWorker(t *testing.T) {
	b := setup(t)
	running := b.create(t, b.spec())
	if e, ok, err := b.rt.Exit(t.Context(), running); err != nil || ok {
		t.Errorf("Exit of a running worker: %+v, %v, %v; want not ok", e, ok, err)
	}
	if _, err := b.c.ContainerKill(t.Context(), running.ID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, b.rt, running)
	e, ok, err := b.rt.Exit(t.Context(), running)
	if err != nil || !ok || e.Code != 137 || e.OOMKilled {
		t.Errorf("Exit of a killed worker: %+v, %v, %v; want code 137", e, ok, err)
	}
	if want := "it was killed by signal 9 (exit code 137)"; e.String() != want {
		t.Errorf("Exit of a killed worker says %q, want %q", e, want)
	}

	spec := b.spec()
	spec.Cmd = []string{"version"} // prints one line and exits
	done := b.create(t, spec)
	waitStopped(t, b.rt, done)
	if e, ok, err := b.rt.Exit(t.Context(), done); err != nil || !ok || e.Code != 0 {
		t.Errorf("Exit of a worker that exited: %+v, %v, %v; want code 0", e, ok, err)
	}
	if e, ok, err := b.rt.Exit(t.Context(), workerruntime.Handle{ID: "meshwork-no-such-container"}); !errors.Is(err, workerruntime.ErrNotFound) || ok {
		t.Errorf("Exit of a missing worker: %+v, %v, %v; want ErrNotFound", e, ok, err)
	}
}

func TestLogsOfTheMainProcess(t *testing.T) {
	b := setup(t)
	spec := b.spec()
	spec.Cmd = []string{"version"} // prints one line and exits
	h := b.create(t, spec)
	waitStopped(t, b.rt, h)
	logs, err := b.rt.Logs(t.Context(), h, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Demultiplexed: no 8-byte frame headers before the text.
	if !strings.HasPrefix(string(logs), "meshworker ") {
		t.Errorf("logs %q, want the version line", logs)
	}
}

func TestCreateNeverPulls(t *testing.T) {
	b := setup(t)
	spec := b.spec()
	spec.Image = "meshwork/does-not-exist:never"
	if _, err := b.rt.Create(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "not present locally") {
		t.Fatalf("Create with a missing image: %v", err)
	}
	// The volume made for it is gone again.
	if _, err := b.c.VolumeInspect(t.Context(), docker.VolumeName(spec.Journey), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("a failed Create left its volume: %v", err)
	}
}

func TestRemoveRefusesWhatIsNotAWorker(t *testing.T) {
	b := setup(t)
	ctr, err := b.c.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Config:     &container.Config{Image: workerImage, Cmd: []string{"idle"}, Labels: b.labels},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	vol, err := b.c.VolumeCreate(t.Context(), client.VolumeCreateOptions{Name: "meshwork-test-" + uuid.NewString(), Labels: b.labels})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rt.Remove(t.Context(), workerruntime.Handle{ID: ctr.ID}, workerruntime.RemoveOptions{}); err == nil {
		t.Error("Remove deleted a container without the journey label")
	}
	if err := b.rt.Remove(t.Context(), workerruntime.Handle{Workspace: vol.Volume.Name}, workerruntime.RemoveOptions{Workspace: true}); err == nil {
		t.Error("Remove deleted a volume without the journey label")
	}
	if _, err := b.c.ContainerInspect(t.Context(), ctr.ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the container is gone: %v", err)
	}
	if _, err := b.c.VolumeInspect(t.Context(), vol.Volume.Name, client.VolumeInspectOptions{}); err != nil {
		t.Errorf("the volume is gone: %v", err)
	}
}

// TestCreateRefusesAForeignContainerUnderItsName: Create creates first and
// looks at what holds the journey's container name only when the engine
// says it is taken; a container that is not the journey's is refused and
// kept, and the volume made for the journey is gone again.
func TestCreateRefusesAForeignContainerUnderItsName(t *testing.T) {
	b := setup(t)
	spec := b.spec()
	foreign, err := b.c.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Name:       "meshwork-" + spec.Journey,
		Config:     &container.Config{Image: workerImage, Cmd: []string{"idle"}, Labels: b.labels},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.rt.Create(t.Context(), spec); err == nil || !strings.Contains(err.Error(), "is not journey "+spec.Journey+"'s") {
		t.Fatalf("Create over a foreign container: %v", err)
	}
	if _, err := b.c.ContainerInspect(t.Context(), foreign.ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("the foreign container is gone: %v", err)
	}
	if _, err := b.c.VolumeInspect(t.Context(), docker.VolumeName(spec.Journey), client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("a refused Create left its volume: %v", err)
	}
}

func TestExportWithoutAContainerLeavesNoHelper(t *testing.T) {
	b := setup(t)
	h := b.create(t, b.spec())
	if err := b.rt.Remove(t.Context(), h, workerruntime.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := b.rt.ExportWorkspace(t.Context(), h, &buf); err != nil {
		t.Fatalf("ExportWorkspace of a volume without a container: %v", err)
	}
	// The image's /workspace seeded the volume: it has .meshwork/.keep.
	tr := tar.NewReader(&buf)
	var names []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	if !slices.Contains(names, ".meshwork/.keep") {
		t.Errorf("export holds %v, want .meshwork/.keep from the image", names)
	}
	f := client.Filters{}.Add("label", runtimetest.LabelTest+"="+b.labels[runtimetest.LabelTest])
	cs, err := b.c.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Items) != 0 {
		t.Errorf("containers left after the export: %+v", cs.Items)
	}
}

func TestNewFromEnv(t *testing.T) {
	t.Parallel()
	engine(t) // skips without an engine
	rt, err := docker.NewFromEnv(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := rt.Close(); err != nil {
			t.Error(err)
		}
	}()
	if rt.Name() != "docker" {
		t.Errorf("Name() = %q", rt.Name())
	}
	if _, err := rt.List(t.Context(), map[string]string{runtimetest.LabelTest: "none-" + uuid.NewString()}); err != nil {
		t.Errorf("List: %v", err)
	}
}

// TestCloseEndsASession checks that Close returns a session whose process
// ignores end of input at once, and that Wait then reports it closed.
func TestCloseEndsASession(t *testing.T) {
	b := setup(t)
	b.probe = newProbeInstaller(t, b.c)
	h := b.create(t, b.spec())
	s, err := b.rt.Exec(t.Context(), h, []string{b.probe.install(t, b.rt, h), "sleep"})
	if err != nil {
		t.Fatal(err)
	}
	line := make([]byte, len("sleeping\n"))
	if _, err := io.ReadFull(s, line); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.Wait(); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Wait after Close reported an exit code for a process that is still running")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Close")
	}
	if _, err := s.Read(line); err == nil {
		t.Error("Read after Close succeeded")
	}
}

// An image that declares a VOLUME gets an anonymous volume beside the
// workspace: removing the worker removes it too, whether the workspace is
// kept or not.
func TestRemoveTakesAnonymousVolumes(t *testing.T) {
	b := setup(t)
	image := "meshwork/worker-with-volume:test-" + strings.ToLower(uuid.NewString()[:8])
	build := exec.CommandContext(t.Context(), "docker", "build", "-q", "-t", image, "--label", runtimetest.LabelTest+"="+b.labels[runtimetest.LabelTest], "-")
	build.Stdin = strings.NewReader("FROM " + workerImage + "\nVOLUME /data\n")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building an image with a VOLUME: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
	for _, keep := range []bool{true, false} {
		spec := b.spec()
		spec.Image = image
		h, err := b.rt.Create(t.Context(), spec)
		if err != nil {
			t.Fatal(err)
		}
		var anonymous string
		for _, m := range b.inspect(t, h.ID).Mounts {
			if m.Destination == "/data" {
				anonymous = m.Name
			}
		}
		if anonymous == "" {
			t.Fatal("the image's VOLUME made no volume")
		}
		if err := b.rt.Remove(t.Context(), h, workerruntime.RemoveOptions{Workspace: !keep}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.VolumeInspect(t.Context(), anonymous, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("workspace kept %v: the anonymous volume %s outlives its worker (%v)", keep, anonymous, err)
		}
		_ = b.rt.Remove(context.WithoutCancel(t.Context()), h, workerruntime.RemoveOptions{Workspace: true})
	}
}
