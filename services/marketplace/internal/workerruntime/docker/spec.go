package docker

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker/seccomp"
)

// Defaults for a Spec's zero fields. They are the hardened defaults of worker
// definitions, repeated here so a caller that forgets a field gets a confined
// worker rather than an unlimited one.
const (
	DefaultUser        = "65532:65532"
	DefaultNetwork     = "none"
	DefaultCPUs        = 1.0
	DefaultMemoryBytes = 512 << 20
	DefaultPIDs        = 256
)

// LabelImage is set on workspace volumes to the image they were created for.
// ExportWorkspace needs an image to mount a volume whose container is gone;
// the image is never run.
const LabelImage = "meshwork.image"

// labelHelper marks the short-lived containers ExportWorkspace creates, so
// that one left behind by a crash is recognisable (it carries no
// LabelJourney, so it is never mistaken for a worker).
const labelHelper = "meshwork.helper"

// securityOpt: no privilege gained through exec (setuid, file
// capabilities), and the worker system call filter (package seccomp).
var securityOpt = []string{"no-new-privileges:true", "seccomp=" + seccomp.Profile}

// tmpfsOptions bound /tmp: the only writable place besides the workspace when
// the root filesystem is read-only.
const tmpfsOptions = "rw,nosuid,nodev,size=64m"

func containerName(journey string) string { return "meshwork-" + journey }

// VolumeName is the workspace volume of a journey.
func VolumeName(journey string) string { return "meshwork-ws-" + journey }

// withDefaults validates a spec and fills its zero fields. A refused spec is
// an error naming every problem, since the caller usually built it from a
// worker definition and wants to fix them all at once.
func withDefaults(spec workerruntime.Spec) (workerruntime.Spec, error) {
	var errs []error
	if !meshapi.ValidID(spec.Journey) {
		errs = append(errs, fmt.Errorf("journey %q must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.Journey))
	}
	if spec.Worker == "" {
		errs = append(errs, errors.New("worker is required"))
	}
	if spec.Image == "" {
		errs = append(errs, errors.New("image is required"))
	}
	if spec.User == "" {
		spec.User = DefaultUser
	}
	if err := checkUser(spec.User); err != nil {
		errs = append(errs, err)
	}
	switch {
	case spec.Network == "":
		spec.Network = DefaultNetwork
	case spec.Network == "none", spec.Network == "bridge", internalNetworkPattern.MatchString(spec.Network):
	default:
		errs = append(errs, fmt.Errorf("network %q is not allowed: use none, bridge or an internal network of Meshwork's (meshwork-...)", spec.Network))
	}
	if spec.CPUs < 0 || spec.MemoryBytes < 0 || spec.PIDs < 0 {
		errs = append(errs, fmt.Errorf("limits must not be negative (cpus %g, memory %d, pids %d)", spec.CPUs, spec.MemoryBytes, spec.PIDs))
	}
	if spec.CPUs == 0 {
		spec.CPUs = DefaultCPUs
	}
	if spec.MemoryBytes == 0 {
		spec.MemoryBytes = DefaultMemoryBytes
	}
	if spec.PIDs == 0 {
		spec.PIDs = DefaultPIDs
	}
	for k := range spec.Labels {
		if k == workerruntime.LabelJourney || k == workerruntime.LabelWorker || k == LabelImage || k == labelHelper {
			errs = append(errs, fmt.Errorf("label %q is set by the runtime", k))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return spec, fmt.Errorf("invalid worker spec: %w", err)
	}
	return spec, nil
}

// checkUser accepts "uid" or "uid:gid", numeric, with a uid other than 0.
// Names are refused: what a name means is decided by the image's /etc/passwd,
// which could map it to root.
func checkUser(user string) error {
	uid, gid, hasGID := strings.Cut(user, ":")
	if uid == "root" || uid == "0" {
		return fmt.Errorf("user %q is root: workers never run as root", user)
	}
	n, err := strconv.ParseUint(uid, 10, 32)
	if err != nil {
		return fmt.Errorf("user %q must be a numeric uid or uid:gid", user)
	}
	if n == 0 {
		return fmt.Errorf("user %q is root: workers never run as root", user)
	}
	if hasGID {
		if _, err := strconv.ParseUint(gid, 10, 32); err != nil {
			return fmt.Errorf("user %q must be a numeric uid or uid:gid", user)
		}
	}
	return nil
}

// labels returns the extra labels plus the runtime's own, which win.
func labels(spec workerruntime.Spec) map[string]string {
	l := make(map[string]string, len(spec.Labels)+2)
	maps.Copy(l, spec.Labels)
	l[workerruntime.LabelJourney] = spec.Journey
	l[workerruntime.LabelWorker] = spec.Worker
	return l
}

// containerConfig builds the hardened container. Everything a worker could
// use to reach the host is off: no capabilities, no privilege escalation, no
// host namespaces, no bind mounts, no published ports.
func containerConfig(spec workerruntime.Spec, volume string) (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		Image:      spec.Image,
		Cmd:        spec.Cmd,
		User:       spec.User,
		Env:        spec.Env,
		WorkingDir: workerruntime.WorkspacePath,
		Labels:     labels(spec),
		// Stdin left open but never attached: a stdio server as the main
		// process blocks on it instead of seeing end of input.
		OpenStdin: spec.KeepStdinOpen,
	}
	pids := spec.PIDs
	hostCfg := &container.HostConfig{
		NetworkMode: container.NetworkMode(spec.Network),
		// Private even where the engine defaults to the host's (cgroup v1),
		// so the worker cannot see the host's cgroup tree.
		CgroupnsMode:   container.CgroupnsModePrivate,
		Init:           new(spec.Init),
		CapDrop:        []string{"ALL"},
		SecurityOpt:    securityOpt,
		ReadonlyRootfs: spec.ReadonlyRootfs,
		Tmpfs:          map[string]string{"/tmp": tmpfsOptions},
		Runtime:        spec.OCIRuntime,
		Mounts: []mount.Mount{{
			Type:   mount.TypeVolume,
			Source: volume,
			Target: workerruntime.WorkspacePath,
		}},
		Resources: container.Resources{
			NanoCPUs: int64(spec.CPUs * 1e9),
			Memory:   spec.MemoryBytes,
			// Equal to Memory: no swap, so the memory limit is the limit.
			MemorySwap: spec.MemoryBytes,
			PidsLimit:  &pids,
		},
	}
	return cfg, hostCfg
}
