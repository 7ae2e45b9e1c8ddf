// Package process runs workers as plain subprocesses of the marketplace, for
// development on machines without Docker. It isolates NOTHING: an exec'd
// process runs as the marketplace's user, sees the whole filesystem and the
// network, and has no limits. Never enable it where callers are untrusted.
//
// A worker here is its workspace directory (StateDir/workspaces/<journey>)
// plus a record of its state; there is no main process. Exec maps the
// in-container path of a binary to a host binary (Config.Binaries) and
// rewrites /workspace arguments to the journey's directory, so the argv the
// marketplace builds for containers works unchanged.
package process

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/tailbuf"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// Config configures a Runtime.
type Config struct {
	// StateDir holds the workspaces (StateDir/workspaces/<journey>) and the
	// worker records (StateDir/workers.json). Required; created if missing.
	StateDir string
	// Binaries maps the argv[0] a worker would run in its container (e.g.
	// "/usr/local/bin/app") to the host binary to run instead. Exec of any
	// other argv[0] fails. Defaults to none.
	Binaries map[string]string
}

// Runtime is the subprocess implementation of workerruntime.Runtime. It is safe
// for concurrent use.
type Runtime struct {
	cfg       Config
	logger    *slog.Logger
	wsRoot    string
	statePath string

	mu       sync.Mutex
	workers  map[string]*record
	sessions map[string]map[*session]struct{}
	logs     map[string]*tailbuf.Buffer
}

var _ workerruntime.Runtime = (*Runtime)(nil)

// record is what the runtime remembers of a worker, and what workers.json
// holds so that List works across restarts of the marketplace.
type record struct {
	Journey string              `json:"journey"`
	Worker  string              `json:"worker"`
	State   workerruntime.State `json:"state"`
	Labels  map[string]string   `json:"labels"`
	Env     []string            `json:"env,omitempty"`
	Created time.Time           `json:"created"`
}

type stateFile struct {
	Workers []*record `json:"workers"`
}

// New returns a runtime keeping its state in cfg.StateDir. A nil logger
// discards logs. It logs a warning that workers are not isolated.
func New(cfg Config, logger *slog.Logger) (*Runtime, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With(slog.String("runtime", "process"))
	if cfg.StateDir == "" {
		return nil, errors.New("process runtime: StateDir is required")
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("process runtime: resolving StateDir: %w", err)
	}
	cfg.StateDir = stateDir
	cfg.Binaries = maps.Clone(cfg.Binaries)
	for in, host := range cfg.Binaries {
		if !strings.HasPrefix(in, "/") {
			return nil, fmt.Errorf("process runtime: binary %q: the in-worker path must be absolute", in)
		}
		fi, err := os.Stat(host)
		if err != nil {
			return nil, fmt.Errorf("process runtime: binary %q: %w", in, err)
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return nil, fmt.Errorf("process runtime: binary %q: %s is not an executable file", in, host)
		}
	}
	r := &Runtime{
		cfg:       cfg,
		logger:    logger,
		wsRoot:    filepath.Join(stateDir, "workspaces"),
		statePath: filepath.Join(stateDir, "workers.json"),
		workers:   map[string]*record{},
		sessions:  map[string]map[*session]struct{}{},
		logs:      map[string]*tailbuf.Buffer{},
	}
	if err := os.MkdirAll(r.wsRoot, 0o700); err != nil {
		return nil, fmt.Errorf("process runtime: creating %s: %w", r.wsRoot, err)
	}
	if err := r.load(); err != nil {
		return nil, err
	}
	logger.Warn("PROCESS RUNTIME ENABLED: workers are NOT isolated; they run as this user with full access to the host's files and network and no limits. Use it for development only.",
		slog.String("state_dir", stateDir))
	return r, nil
}

// Name implements workerruntime.Runtime.
func (r *Runtime) Name() string { return "process" }

// checkSpec refuses what the docker runtime refuses, so a spec that works
// here works in a container too; the fields only a container can honour are
// then ignored.
func checkSpec(spec workerruntime.Spec) error {
	var errs []error
	if !meshapi.ValidID(spec.Journey) {
		errs = append(errs, fmt.Errorf("journey %q must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", spec.Journey))
	}
	if spec.Worker == "" {
		errs = append(errs, errors.New("worker is required"))
	}
	if spec.User != "" {
		uid, gid, hasGID := strings.Cut(spec.User, ":")
		n, err := strconv.ParseUint(uid, 10, 32)
		switch {
		case uid == "root" || (err == nil && n == 0):
			errs = append(errs, fmt.Errorf("user %q is root: workers never run as root", spec.User))
		case err != nil:
			errs = append(errs, fmt.Errorf("user %q must be a numeric uid or uid:gid", spec.User))
		case hasGID:
			if _, err := strconv.ParseUint(gid, 10, 32); err != nil {
				errs = append(errs, fmt.Errorf("user %q must be a numeric uid or uid:gid", spec.User))
			}
		}
	}
	if spec.Network != "" && spec.Network != "none" && spec.Network != "bridge" {
		errs = append(errs, fmt.Errorf("network %q is not allowed: use none or bridge", spec.Network))
	}
	if spec.CPUs < 0 || spec.MemoryBytes < 0 || spec.PIDs < 0 {
		errs = append(errs, errors.New("limits must not be negative"))
	}
	for k := range spec.Labels {
		if k == workerruntime.LabelJourney || k == workerruntime.LabelWorker {
			errs = append(errs, fmt.Errorf("label %q is set by the runtime", k))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid worker spec: %w", err)
	}
	return nil
}

// Create implements workerruntime.Runtime: it creates (or reuses) the workspace
// directory and records the worker as running. Live sessions of an earlier
// life of the journey are killed.
func (r *Runtime) Create(ctx context.Context, spec workerruntime.Spec) (workerruntime.Handle, error) {
	if err := checkSpec(spec); err != nil {
		return workerruntime.Handle{}, err
	}
	r.logger.DebugContext(ctx, "ignoring spec fields that need a container",
		slog.String("journey", spec.Journey), slog.String("image", spec.Image), slog.String("user", spec.User),
		slog.String("network", spec.Network), slog.Bool("readonly_rootfs", spec.ReadonlyRootfs),
		slog.String("oci_runtime", spec.OCIRuntime), slog.Float64("cpus", spec.CPUs),
		slog.Int64("memory_bytes", spec.MemoryBytes), slog.Int64("pids", spec.PIDs),
		slog.Bool("keep_stdin_open", spec.KeepStdinOpen), slog.Any("cmd", spec.Cmd))
	r.killSessions(spec.Journey, 0)

	dir := r.workspace(spec.Journey)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return workerruntime.Handle{}, fmt.Errorf("creating workspace %s: %w", dir, err)
	}
	l := maps.Clone(spec.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[workerruntime.LabelJourney] = spec.Journey
	l[workerruntime.LabelWorker] = spec.Worker

	r.mu.Lock()
	defer r.mu.Unlock()
	r.workers[spec.Journey] = &record{
		Journey: spec.Journey, Worker: spec.Worker, State: workerruntime.StateRunning,
		Labels: l, Env: slices.Clone(spec.Env), Created: time.Now().UTC(),
	}
	if err := r.saveLocked(); err != nil {
		delete(r.workers, spec.Journey)
		return workerruntime.Handle{}, err
	}
	r.logger.InfoContext(ctx, "process worker created", slog.String("journey", spec.Journey), slog.String("worker", spec.Worker), slog.String("workspace", dir))
	return workerruntime.Handle{ID: spec.Journey, Workspace: dir}, nil
}

// Start implements workerruntime.Runtime.
func (r *Runtime) Start(ctx context.Context, h workerruntime.Handle) error {
	return r.setState(ctx, h, workerruntime.StateRunning)
}

// Stop implements workerruntime.Runtime: live sessions get SIGTERM, then SIGKILL
// after grace.
func (r *Runtime) Stop(ctx context.Context, h workerruntime.Handle, grace time.Duration) error {
	if err := r.setState(ctx, h, workerruntime.StateStopped); err != nil {
		return err
	}
	r.killSessions(h.ID, grace)
	return nil
}

func (r *Runtime) setState(ctx context.Context, h workerruntime.Handle, s workerruntime.State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.workers[h.ID]
	if rec == nil {
		return fmt.Errorf("setting worker %q %s: %w", h.ID, s, workerruntime.ErrNotFound)
	}
	if rec.State == s {
		return nil
	}
	old := rec.State
	rec.State = s
	if err := r.saveLocked(); err != nil {
		rec.State = old
		return err
	}
	r.logger.InfoContext(ctx, "process worker state changed", slog.String("journey", rec.Journey), slog.String("state", string(s)))
	return nil
}

// Remove implements workerruntime.Runtime. Sessions are killed at once; the
// workspace is deleted only if asked, and only inside StateDir.
func (r *Runtime) Remove(ctx context.Context, h workerruntime.Handle, opts workerruntime.RemoveOptions) error {
	journey, err := r.journeyOf(h)
	if err != nil {
		return err
	}
	// The record goes first: Exec checks it under the lock, so no session
	// can start between the kill and the removal.
	var saveErr error
	r.mu.Lock()
	if _, ok := r.workers[journey]; ok {
		delete(r.workers, journey)
		delete(r.logs, journey)
		saveErr = r.saveLocked()
	}
	r.mu.Unlock()
	r.killSessions(journey, 0)
	if saveErr != nil {
		return saveErr
	}
	if opts.Workspace {
		if err := os.RemoveAll(r.workspace(journey)); err != nil {
			return fmt.Errorf("removing workspace of %s: %w", journey, err)
		}
	}
	r.logger.InfoContext(ctx, "process worker removed", slog.String("journey", journey), slog.Bool("workspace", opts.Workspace))
	return nil
}

// State implements workerruntime.Runtime. A worker whose workspace directory has
// vanished is missing, whatever its record says.
func (r *Runtime) State(_ context.Context, h workerruntime.Handle) (workerruntime.State, error) {
	r.mu.Lock()
	rec := r.workers[h.ID]
	var s workerruntime.State
	if rec != nil {
		s = rec.State
	}
	r.mu.Unlock()
	if rec == nil {
		return workerruntime.StateMissing, nil
	}
	if _, err := os.Stat(r.workspace(h.ID)); errors.Is(err, fs.ErrNotExist) {
		return workerruntime.StateMissing, nil
	}
	return s, nil
}

// List implements workerruntime.Runtime.
func (r *Runtime) List(_ context.Context, labels map[string]string) ([]workerruntime.Listed, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []workerruntime.Listed
	for _, rec := range r.workers {
		if !matches(rec.Labels, labels) {
			continue
		}
		out = append(out, workerruntime.Listed{
			Handle:  workerruntime.Handle{ID: rec.Journey, Workspace: r.workspace(rec.Journey)},
			Journey: rec.Journey,
			Worker:  rec.Worker,
			State:   rec.State,
		})
	}
	slices.SortFunc(out, func(a, b workerruntime.Listed) int { return strings.Compare(a.Journey, b.Journey) })
	return out, nil
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Logs implements workerruntime.Runtime. There is no main process, so the logs
// are what exec'd processes wrote to stderr (the last MiB, kept in memory).
func (r *Runtime) Logs(_ context.Context, h workerruntime.Handle, tail int) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.workers[h.ID] == nil {
		return nil, fmt.Errorf("reading logs of %q: %w", h.ID, workerruntime.ErrNotFound)
	}
	b := r.logs[h.ID]
	if b == nil {
		return nil, nil
	}
	return b.Lines(tail), nil
}

// ExportWorkspace implements workerruntime.Runtime: a tar of the directory's
// contents, names relative to it. Symbolic links are stored, not followed;
// sockets, devices and pipes are skipped.
func (r *Runtime) ExportWorkspace(ctx context.Context, h workerruntime.Handle, w io.Writer) error {
	journey, err := r.journeyOf(h)
	if err != nil {
		return err
	}
	dir := r.workspace(journey)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("exporting workspace of %s: %w", journey, workerruntime.ErrNotFound)
		}
		return fmt.Errorf("exporting workspace of %s: %w", journey, err)
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if path == dir {
			return nil
		}
		return addToTar(tw, dir, path, d)
	})
	if err != nil {
		return fmt.Errorf("exporting workspace of %s: %w", journey, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("exporting workspace of %s: %w", journey, err)
	}
	return nil
}

func addToTar(tw *tar.Writer, root, path string, d fs.DirEntry) error {
	info, err := d.Info()
	if err != nil {
		return err
	}
	link := ""
	switch {
	case info.Mode().IsRegular(), info.IsDir():
	case info.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(path); err != nil {
			return err
		}
	default:
		return nil
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	if info.IsDir() {
		hdr.Name += "/"
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	// CopyN: a file that grew since Info must not overflow its header.
	if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

func (r *Runtime) workspace(journey string) string { return filepath.Join(r.wsRoot, journey) }

// journeyOf names the journey of a handle: its ID, or, for a handle with
// only a workspace, the workspace directory's name if it lies in StateDir.
// Anything else is refused, so a bad handle can never point Remove at an
// arbitrary directory.
func (r *Runtime) journeyOf(h workerruntime.Handle) (string, error) {
	j := h.ID
	if j == "" && h.Workspace != "" {
		if filepath.Dir(filepath.Clean(h.Workspace)) != r.wsRoot {
			return "", fmt.Errorf("workspace %q is not under %s", h.Workspace, r.wsRoot)
		}
		j = filepath.Base(h.Workspace)
	}
	if !meshapi.ValidID(j) {
		return "", fmt.Errorf("invalid worker handle %+v", h)
	}
	if h.Workspace != "" && filepath.Clean(h.Workspace) != r.workspace(j) {
		return "", fmt.Errorf("worker handle %+v: workspace is not the journey's (%s)", h, r.workspace(j))
	}
	return j, nil
}

func (r *Runtime) load() error {
	b, err := os.ReadFile(r.statePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("process runtime: reading %s: %w", r.statePath, err)
	}
	var sf stateFile
	if err := json.Unmarshal(b, &sf); err != nil {
		return fmt.Errorf("process runtime: parsing %s: %w", r.statePath, err)
	}
	for _, rec := range sf.Workers {
		if rec != nil && meshapi.ValidID(rec.Journey) {
			r.workers[rec.Journey] = rec
		}
	}
	return nil
}

// saveLocked writes workers.json atomically (write, sync, rename), so a crash
// leaves the old file or the new one, never half of one. r.mu must be held.
func (r *Runtime) saveLocked() error {
	sf := stateFile{Workers: slices.Collect(maps.Values(r.workers))}
	slices.SortFunc(sf.Workers, func(a, b *record) int { return strings.Compare(a.Journey, b.Journey) })
	b, err := json.MarshalIndent(sf, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding worker records: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(r.statePath), ".workers-*.json")
	if err != nil {
		return fmt.Errorf("saving worker records: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename anyway
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("saving worker records: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("saving worker records: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving worker records: %w", err)
	}
	if err := os.Rename(tmp.Name(), r.statePath); err != nil {
		return fmt.Errorf("saving worker records: %w", err)
	}
	return nil
}
