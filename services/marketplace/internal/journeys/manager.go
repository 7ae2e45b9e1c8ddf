package journeys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/proctree"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/egress"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// MeshworkerPath is where builtin worker images carry meshworker: the
// entrypoint of the images `make images` builds.
const MeshworkerPath = "/usr/local/bin/app"

// Config configures a Manager.
type Config struct {
	// Catalog is the worker catalog. Required.
	Catalog *workerdef.Catalog
	// Store keeps journeys and the audit log. Required.
	Store *store.Store
	// Runtimes by isolation level. "container" serves the default level;
	// "process" is present only when the operator opted in.
	Runtimes map[meshtype.IsolationLevel]workerruntime.Runtime
	// Labels are added to every worker container and volume (tests set
	// meshwork.test). Defaults to none.
	Labels map[string]string
	// ArchiveDir receives the tarballs of stop_worker's archive mode.
	// Defaults to $TMPDIR/meshwork-archives.
	ArchiveDir string
	// StopGrace is how long a stopping worker gets before it is killed.
	// Defaults to 5s.
	StopGrace time.Duration
	// ActionTimeout caps one action. Defaults to 5m.
	ActionTimeout time.Duration
	// ChannelIdle is how long a journey's channel to its worker stays open
	// without a call (RunIdleStopper closes it; the next action opens a
	// new one). Defaults to DefaultChannelIdle.
	ChannelIdle time.Duration
	// Logger receives operational logs. Defaults to discarding them.
	Logger *slog.Logger
	// Metrics is where the Prometheus metrics are registered. Defaults to
	// none (they are still counted).
	Metrics prometheus.Registerer
	// AgentEnv is passed to agent worker containers: the agent CLI's
	// credentials ("ANTHROPIC_API_KEY=...", "CLAUDE_CODE_OAUTH_TOKEN=...").
	// Defaults to none.
	AgentEnv []string
	// NestedMCPURL is the marketplace's MCP URL as agent containers reach it.
	// When set, every agent journey gets an MCP config pointing there with a
	// token of its own, which sees only the journeys that agent spawns
	// (recursive composition). Defaults to none.
	NestedMCPURL string
	// Bases is the marketplace's own record of what each journey's workspace
	// started from. Required.
	Bases *bases.Store
	// Sources is what spawn_worker sources may be: allowed git hosts and
	// local roots, credentials, limits. Defaults to no git source allowed
	// (archives and journey patches need no allowlist).
	Sources source.Policy
	// MaxJourneysPerCaller is the most live journeys (starting or active:
	// holding a worker) one caller may have; a spawn that would make one
	// more is refused. Defaults to DefaultMaxJourneysPerCaller.
	MaxJourneysPerCaller int
	// MaxJourneys is the most live journeys of all callers together, in
	// this marketplace's database. Defaults to DefaultMaxJourneys.
	MaxJourneys int
	// Egress is the egress proxy of workers with network egress; nil
	// refuses to spawn them. EgressNetwork is the internal network they
	// join (created when missing; defaults to DefaultEgressNetwork);
	// EgressProxyHost and EgressProxyPort are where they reach the proxy
	// (the host defaults to the network's gateway: a marketplace on the
	// host); EgressNoProxy is their NO_PROXY (addresses they reach on the
	// internal network itself, such as the marketplace for nested workers;
	// defaults to localhost,127.0.0.1).
	Egress          *egress.Proxy
	EgressNetwork   string
	EgressProxyHost string
	EgressProxyPort int
	EgressNoProxy   string
	// PoolSizes overrides the definitions' warm pool sizes by worker id
	// (0 turns a definition's pool off). Defaults to none.
	PoolSizes map[string]int
	// MaxPoolMembers bounds the warm pools' members, all pools of all
	// marketplaces on the database together. Defaults to
	// DefaultMaxPoolMembers.
	MaxPoolMembers int
}

// DefaultChannelIdle is how long an unused channel to a worker stays open.
const DefaultChannelIdle = 2 * time.Minute

// The default quotas of live journeys.
const (
	DefaultMaxJourneysPerCaller = 20
	DefaultMaxJourneys          = 200
)

// Manager runs journeys. It is safe for concurrent use; actions on one
// journey run one at a time.
type Manager struct {
	cfg     Config
	logger  *slog.Logger
	metrics *metrics

	mu       sync.Mutex
	channels map[uuid.UUID]*channel
	spawning map[uuid.UUID]bool
	// egressRefusals bounds the egress refusals audited.
	egressRefusals refusalLimiter
	// poolChannels are the channels this marketplace opened to its pool
	// members, handed to the journey that claims one here (under mu).
	poolChannels map[uuid.UUID]*channel
	// poolWake wakes the pool refiller (RunPools) after a claim.
	poolWake chan struct{}
	// local queues this process's waiters for a journey's lock
	// (lockJourney), held from reading its counters to recording its
	// action, so the gate's per-journey limits see every earlier action
	// and the idle stopper never stops a journey mid-action.
	local keyedMutex
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Catalog == nil || cfg.Store == nil || cfg.Bases == nil {
		return nil, errors.New("journeys: Catalog, Store and Bases are required")
	}
	if cfg.Runtimes[meshtype.IsolationContainer] == nil && cfg.Runtimes[meshtype.IsolationProcess] == nil {
		return nil, errors.New("journeys: no runtime configured")
	}
	if cfg.ArchiveDir == "" {
		cfg.ArchiveDir = os.TempDir() + "/meshwork-archives"
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 5 * time.Second
	}
	if cfg.ActionTimeout == 0 {
		cfg.ActionTimeout = 5 * time.Minute
	}
	if cfg.ChannelIdle == 0 {
		cfg.ChannelIdle = DefaultChannelIdle
	}
	if cfg.MaxJourneysPerCaller < 0 || cfg.MaxJourneys < 0 {
		return nil, errors.New("journeys: MaxJourneysPerCaller and MaxJourneys must not be negative")
	}
	if cfg.MaxJourneysPerCaller == 0 {
		cfg.MaxJourneysPerCaller = DefaultMaxJourneysPerCaller
	}
	if cfg.MaxJourneys == 0 {
		cfg.MaxJourneys = DefaultMaxJourneys
	}
	if cfg.MaxPoolMembers < 0 {
		return nil, errors.New("journeys: MaxPoolMembers must not be negative")
	}
	if cfg.MaxPoolMembers == 0 {
		cfg.MaxPoolMembers = DefaultMaxPoolMembers
	}
	for id, n := range cfg.PoolSizes {
		if _, ok := cfg.Catalog.Lookup(id); !ok {
			return nil, fmt.Errorf("journeys: a pool size is set for worker %q, which is not in the catalog", id)
		}
		if n < 0 || n > workerdef.MaxPoolSize {
			return nil, fmt.Errorf("journeys: the pool size of worker %q must be from 0 to %d, got %d", id, workerdef.MaxPoolSize, n)
		}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(newLiveJourneys(cfg.Store, cfg.Catalog, logger)); err != nil {
			return nil, fmt.Errorf("journeys: registering meshwork_journeys_live: %w", err)
		}
	}
	metrics, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("journeys: %w", err)
	}
	if cfg.EgressNetwork == "" {
		cfg.EgressNetwork = DefaultEgressNetwork
	}
	if cfg.EgressNoProxy == "" {
		cfg.EgressNoProxy = "localhost,127.0.0.1"
	}
	m := &Manager{
		cfg: cfg, logger: logger, metrics: metrics, channels: map[uuid.UUID]*channel{}, spawning: map[uuid.UUID]bool{},
		poolChannels: map[uuid.UUID]*channel{}, poolWake: make(chan struct{}, 1),
	}
	if cfg.Egress != nil {
		cfg.Egress.Resolve(m.egressGrantOf)
	}
	return m, nil
}

// Close closes every open worker channel; workers (and pool members) keep
// running.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, channels := range []map[uuid.UUID]*channel{m.channels, m.poolChannels} {
		for uid, c := range channels {
			c.close()
			delete(channels, uid)
		}
	}
}

func checkJourneyID(id string) error {
	if !meshapi.ValidID(id) {
		return invalid("journey_id %q must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit", textcut.Valid(id, 140))
	}
	return nil
}

// SpawnRequest is the input of spawn_worker.
type SpawnRequest struct {
	WorkerID       string `json:"worker_id" jsonschema:"id of a catalog worker (see list_workers)"`
	JourneyID      string `json:"journey_id" jsonschema:"your name for this worker instance and its workspace: 1-128 of A-Z a-z 0-9 . _ -"`
	IsolationLevel string `json:"isolation_level,omitempty" jsonschema:"container (default) or process (only if the marketplace allows it)"`
	Mode           string `json:"mode,omitempty" jsonschema:"normal (default: spawn, or report already_active), resume (restart a stopped or orphaned journey with its workspace) or fresh (destroy and respawn)"`
	// Source seeds the workspace of a new journey (or a fresh one).
	Source *source.Spec `json:"source,omitempty" jsonschema:"what the workspace starts from (new journeys and mode fresh): {git: {url, ref, depth}}, {archive: {tar_gz_base64, sha256}} or {journey, patch}; default empty"`
}

// SpawnResult is the output of spawn_worker.
type SpawnResult struct {
	JourneyID   string `json:"journey_id"`
	WorkerID    string `json:"worker_id"`
	State       string `json:"state" jsonschema:"active, or already_active when a normal spawn found the journey running"`
	ContainerID string `json:"container_id"`
	Workspace   string `json:"workspace"`
	// Source is what the workspace was seeded from, when a source was given.
	Source *source.Record `json:"source,omitempty" jsonschema:"the source the workspace was seeded from: kind, commit, files, bytes"`
	// Pooled: the worker came from the definition's warm pool.
	Pooled bool `json:"pooled,omitempty" jsonschema:"true when the worker was taken from the worker's warm pool rather than created for this spawn"`
}

// Worker returns a spawnable catalog worker, or a not-found error that says
// where the catalog is listed.
func (m *Manager) Worker(workerID string) (*workerdef.Entry, error) {
	e, ok := m.cfg.Catalog.Lookup(workerID)
	if !ok || e.Definition.Abstract {
		return nil, notFound("unknown worker %q (list_workers shows the catalog)", textcut.Valid(workerID, 140))
	}
	return e, nil
}

func (m *Manager) runtimeFor(level string) (workerruntime.Runtime, meshtype.IsolationLevel, error) {
	l := meshtype.IsolationLevel(level)
	if l == "" {
		l = meshtype.IsolationContainer
	}
	if l != meshtype.IsolationContainer && l != meshtype.IsolationProcess {
		return nil, "", invalid("isolation_level %q is not one of container, process", textcut.Valid(level, 64))
	}
	rt := m.cfg.Runtimes[l]
	if rt == nil {
		return nil, "", invalid("isolation_level %s is not enabled on this marketplace", l)
	}
	return rt, l, nil
}

// Spawn starts a worker for a journey, following the spawn mode.
func (m *Manager) Spawn(ctx context.Context, caller string, req SpawnRequest) (SpawnResult, error) {
	if err := checkJourneyID(req.JourneyID); err != nil {
		return SpawnResult{}, err
	}
	entry, err := m.Worker(req.WorkerID)
	if err != nil {
		return SpawnResult{}, err
	}
	level := req.IsolationLevel
	if level == "" {
		level = string(entry.Definition.Isolation.Level)
	}
	mode := req.Mode
	if mode == "" {
		mode = "normal"
	}
	if mode != "normal" && mode != "resume" && mode != "fresh" {
		return SpawnResult{}, invalid("mode %q is not one of normal, resume, fresh", textcut.Valid(req.Mode, 64))
	}
	// Checked before a source is fetched or unpacked for a spawn that
	// cannot run.
	if _, _, err := m.runtimeFor(level); err != nil {
		return SpawnResult{}, err
	}
	ctx, span := startSpawn(ctx, req.JourneyID, entry.Definition.ID, mode)
	defer span.End()
	res, err := m.spawn(ctx, caller, req, entry, level, mode)
	if err != nil {
		telemetry.Fail(span, err, errorType(err))
		span.SetAttributes(attrSpawnOutcome.String("error"))
		return res, err
	}
	span.SetAttributes(attrSpawnOutcome.String(res.State), attrContainerID.String(res.ContainerID), attrSpawnPooled.Bool(res.Pooled))
	return res, nil
}

// spawn is Spawn once the request is valid, inside its span.
func (m *Manager) spawn(ctx context.Context, caller string, req SpawnRequest, entry *workerdef.Entry, level, mode string) (SpawnResult, error) {
	if req.Source != nil && mode == "resume" {
		return SpawnResult{}, invalid("a source seeds a new workspace; mode resume keeps the journey's own (use mode fresh to start over from the source)")
	}
	j, err := m.cfg.Store.Journey(ctx, caller, req.JourneyID)
	if err == nil && req.Source != nil && mode != "fresh" {
		return SpawnResult{}, conflict("journey %q exists; a source seeds only a new journey or mode fresh", j.ID)
	}
	if errors.Is(err, store.ErrNotFound) && mode == "resume" {
		return SpawnResult{}, notFound("no journey %q to resume", req.JourneyID)
	}
	// A spawn over quota is refused before its source is fetched; the
	// admission that makes the journey live checks again, under a lock.
	// A journey live already passes.
	if err == nil || errors.Is(err, store.ErrNotFound) {
		uid := uuid.Nil
		if err == nil {
			uid = j.UID
		}
		if qerr := m.cfg.Store.CheckQuota(ctx, caller, uid, m.quota()); qerr != nil {
			return SpawnResult{}, m.quotaRefused(ctx, caller, qerr)
		}
	}
	// A new workspace (a new journey, or fresh) gets its base, built and
	// checked before anything is created.
	var src *preparedSource
	if errors.Is(err, store.ErrNotFound) || (err == nil && mode == "fresh") {
		var perr error
		if src, perr = m.prepareSource(ctx, caller, req.Source); perr != nil {
			return SpawnResult{}, perr
		}
	}
	if err == nil && mode != "fresh" {
		// A journey keeps its isolation: its workspace lives in that workerruntime.
		if req.IsolationLevel != "" && req.IsolationLevel != j.IsolationLevel {
			return SpawnResult{}, conflict("journey %q runs with isolation_level %s; use mode fresh to change it", j.ID, j.IsolationLevel)
		}
		level = j.IsolationLevel
	}
	rt, lvl, err2 := m.runtimeFor(level)
	if err2 != nil {
		return SpawnResult{}, err2
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		parent, perr := m.parentOf(ctx, caller)
		if perr != nil {
			return SpawnResult{}, perr
		}
		// A warm pool's member, when there is one, is the journey's
		// worker: claimed with the journey's row, under its lock.
		claimed := time.Now()
		pj, unlock, ok, cerr := m.claimPooled(ctx, caller, req.JourneyID, entry, lvl, parent)
		if cerr != nil {
			return SpawnResult{}, m.createRefused(ctx, caller, req.JourneyID, cerr)
		}
		if ok {
			defer unlock()
			m.adoptPoolChannel(pj.UID)
			m.wakePools()
			if req.Source == nil {
				src = nil // the member's workspace has the empty base, recorded by the claim
			}
			res, err := m.finishSpawn(ctx, rt, handle(pj), pj, entry, src, claimed, true)
			if err != nil {
				m.dropChannel(pj.UID) // its worker is gone
			}
			return res, err
		}
		// The new journey's lock is held from before its row exists until
		// its worker is recorded: another marketplace's reconciliation
		// leaves a journey being spawned alone.
		uid := uuid.New()
		unlock, lerr := m.lockJourney(ctx, uid)
		if lerr != nil {
			return SpawnResult{}, lerr
		}
		defer unlock()
		j, err = m.cfg.Store.CreateJourney(ctx, store.Journey{
			UID: uid, Caller: caller, ID: req.JourneyID, WorkerID: entry.Definition.ID,
			DefinitionHash: entry.Hash, IsolationLevel: string(lvl), ParentJourney: parent,
		}, m.quota())
		if err != nil {
			return SpawnResult{}, m.createRefused(ctx, caller, req.JourneyID, err)
		}
	case err != nil:
		return SpawnResult{}, err
	default:
		if j.WorkerID != entry.Definition.ID && mode != "fresh" {
			return SpawnResult{}, conflict("journey %q runs worker %s, not %s; use mode fresh to replace it", j.ID, j.WorkerID, entry.Definition.ID)
		}
		if j.State.Live() && mode != "fresh" {
			// The store says live; make sure the runtime agrees before
			// reporting it, so a killed worker is not reported active.
			if m.checkLive(ctx, j) {
				return SpawnResult{JourneyID: j.ID, WorkerID: j.WorkerID, State: "already_active", ContainerID: j.ContainerID, Workspace: j.Workspace}, nil
			}
		}
		if err := m.beginSpawn(j.UID); err != nil {
			return SpawnResult{}, err
		}
		defer m.endSpawn(j.UID)
		// Under the journey's lock, as a new journey's spawn: no action
		// runs and no other marketplace reconciles it meanwhile. Another
		// marketplace may have spawned it while this one waited.
		unlock, lerr := m.lockJourney(ctx, j.UID)
		if lerr != nil {
			return SpawnResult{}, lerr
		}
		defer unlock()
		if j, err = m.cfg.Store.JourneyByUID(ctx, j.UID); err != nil {
			return SpawnResult{}, err
		}
		if j.State == store.StateDeleted {
			return SpawnResult{}, deletedMeanwhile(j.ID)
		}
		if j.State.Live() && mode != "fresh" && m.checkLive(ctx, j) {
			return SpawnResult{JourneyID: j.ID, WorkerID: j.WorkerID, State: "already_active", ContainerID: j.ContainerID, Workspace: j.Workspace}, nil
		}
		if mode == "fresh" {
			// Admitted (and reset) before the old worker and workspace are
			// removed: a refused spawn destroys nothing.
			if err := m.cfg.Store.Reset(ctx, caller, j.UID, entry.Definition.ID, entry.Hash, string(lvl), m.quota()); err != nil {
				return SpawnResult{}, m.restartRefused(ctx, caller, j.ID, err)
			}
			m.dropChannel(j.UID)
			if old, _, err := m.runtimeFor(j.IsolationLevel); err == nil {
				if err := old.Remove(ctx, handle(j), workerruntime.RemoveOptions{Workspace: true}); err != nil {
					// Reset kept the handles: the next fresh spawn removes
					// them, rather than reusing the old workspace.
					_ = m.cfg.Store.FailSpawn(context.WithoutCancel(ctx), j.UID)
					return SpawnResult{}, fmt.Errorf("removing the old worker: %w", err)
				}
			}
		} else {
			if err := m.cfg.Store.Restart(ctx, caller, j.UID, entry.Hash, m.quota()); err != nil {
				return SpawnResult{}, m.restartRefused(ctx, caller, j.ID, err)
			}
			m.dropChannel(j.UID)
		}
	}

	started := time.Now()
	spec := m.spec(j.UID, &entry.Definition)
	if m.nestedAgent(entry) {
		env, err := m.nestedAccess(ctx, caller, j)
		if err != nil {
			// Admitted as starting: failed frees its quota slot.
			_ = m.cfg.Store.FailSpawn(context.WithoutCancel(ctx), j.UID)
			return SpawnResult{}, err
		}
		spec.Env = append(spec.Env, env)
	}
	if entry.Definition.Isolation.Network == meshtype.NetworkEgress {
		if err := m.egressSpec(ctx, rt, &spec); err != nil {
			_ = m.cfg.Store.FailSpawn(context.WithoutCancel(ctx), j.UID)
			return SpawnResult{}, err
		}
	}
	h, err := rt.Create(ctx, spec)
	if err != nil {
		m.metrics.spawns.WithLabelValues(entry.Definition.ID, "error").Observe(time.Since(started).Seconds())
		_ = m.cfg.Store.FailSpawn(context.WithoutCancel(ctx), j.UID)
		m.logger.ErrorContext(ctx, "spawning worker failed", slog.String("journey", j.UID.String()), slog.String("worker", entry.Definition.ID), slog.Any("error", err))
		return SpawnResult{}, unavailable("could not start worker %s: %v", entry.Definition.ID, err)
	}
	return m.finishSpawn(ctx, rt, h, j, entry, src, started, false)
}

// finishSpawn makes a created worker (cold, or a claimed pool member) its
// journey's: let through the egress proxy, its workspace seeded, and
// recorded as running. A failure removes the worker and fails the journey.
func (m *Manager) finishSpawn(ctx context.Context, rt workerruntime.Runtime, h workerruntime.Handle, j store.Journey, entry *workerdef.Entry, src *preparedSource, started time.Time, pooled bool) (SpawnResult, error) {
	if entry.Definition.Isolation.Network == meshtype.NetworkEgress {
		if err := m.egressGrant(ctx, rt, h, j.UID); err != nil {
			cleanup := context.WithoutCancel(ctx)
			// The workspace is kept: it may hold a resumed journey's files.
			if rerr := rt.Remove(cleanup, h, workerruntime.RemoveOptions{}); rerr != nil {
				m.logger.WarnContext(cleanup, "removing a worker whose egress grant failed", slog.String("journey", j.UID.String()), slog.Any("error", rerr))
			}
			_ = m.cfg.Store.FailSpawn(cleanup, j.UID)
			return SpawnResult{}, unavailable("could not let worker %s through the egress proxy: %v", entry.Definition.ID, err)
		}
	}
	if src != nil {
		if err := m.seed(ctx, rt, h, j, &entry.Definition, src); err != nil {
			m.metrics.spawns.WithLabelValues(entry.Definition.ID, "error").Observe(time.Since(started).Seconds())
			cleanup := context.WithoutCancel(ctx)
			if rerr := rt.Remove(cleanup, h, workerruntime.RemoveOptions{Workspace: true}); rerr != nil {
				m.logger.WarnContext(cleanup, "removing a worker whose seeding failed", slog.String("journey", j.UID.String()), slog.Any("error", rerr))
			}
			m.dropBase(cleanup, j)
			m.egressRevoke(j.UID)
			_ = m.cfg.Store.FailSpawn(cleanup, j.UID)
			m.logger.ErrorContext(ctx, "seeding the workspace failed", slog.String("journey", j.UID.String()), slog.Any("error", err))
			return SpawnResult{}, unavailable("could not seed the workspace of %s: %v", entry.Definition.ID, err)
		}
	}
	// Not cancelled with the request: the worker exists now and must be
	// recorded, or it would run unnamed.
	recorded, err := m.cfg.Store.SetRunning(context.WithoutCancel(ctx), j.UID, h.ID, h.Workspace)
	if err != nil {
		m.egressRevoke(j.UID)
		_ = m.cfg.Store.SetFailed(context.WithoutCancel(ctx), j.UID, h.ID, h.Workspace)
		return SpawnResult{}, err
	}
	if !recorded {
		return SpawnResult{}, m.undoSpawn(ctx, rt, h, j)
	}
	outcome := "ok"
	if pooled {
		outcome = "pooled"
	}
	m.metrics.spawns.WithLabelValues(entry.Definition.ID, outcome).Observe(time.Since(started).Seconds())
	m.logger.InfoContext(ctx, "worker spawned", slog.String("journey", j.UID.String()), slog.String("worker", entry.Definition.ID), slog.Bool("pooled", pooled))
	res := SpawnResult{JourneyID: j.ID, WorkerID: entry.Definition.ID, State: string(store.StateActive), ContainerID: h.ID, Workspace: h.Workspace, Pooled: pooled}
	if src != nil {
		res.Source = src.record
	}
	return res, nil
}

// restartRefused is a refused Restart or Reset as the client sees it: the
// quota's refusal, or a journey a stop_worker deleted meanwhile.
func (m *Manager) restartRefused(ctx context.Context, caller, id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return deletedMeanwhile(id)
	}
	return m.quotaRefused(ctx, caller, err)
}

// deletedMeanwhile refuses a spawn whose journey a stop_worker deleted while
// the spawn waited for it: its id is free, and it is not brought back.
func deletedMeanwhile(id string) error {
	return conflict("journey %q was deleted while this spawn waited; spawn it again to start a new one", id)
}

// undoSpawn removes the worker a spawn made for a journey that a
// stop_worker stopped meanwhile (it read the journey before the spawn
// began, so did not wait for it): the journey stays as the stop left it,
// its workspace gone with the worker if the stop deleted it.
func (m *Manager) undoSpawn(ctx context.Context, rt workerruntime.Runtime, h workerruntime.Handle, j store.Journey) error {
	cleanup := context.WithoutCancel(ctx)
	m.egressRevoke(j.UID)
	m.dropChannel(j.UID)
	now, err := m.cfg.Store.JourneyByUID(cleanup, j.UID)
	deleted := err == nil && now.State == store.StateDeleted
	if err := rt.Remove(cleanup, h, workerruntime.RemoveOptions{Workspace: deleted}); err != nil {
		m.logger.WarnContext(cleanup, "removing the worker of a journey stopped while it spawned", slog.String("journey", j.UID.String()), slog.Any("error", err))
	}
	if deleted {
		m.dropBase(cleanup, j)
	}
	m.logger.InfoContext(ctx, "a spawn gave way to a stop that came first", slog.String("journey", j.UID.String()), slog.Bool("deleted", deleted))
	if deleted {
		return deletedMeanwhile(j.ID)
	}
	return conflict("journey %q was stopped while its worker started; spawn it again with mode resume", j.ID)
}

// parentOf is the journey whose agent a caller is, for a nested caller
// ("<caller>/<journey id>", the identity of an agent's token; journey ids
// hold no "/"), or nil: its journeys are that journey's nested journeys,
// stopped with it.
func (m *Manager) parentOf(ctx context.Context, caller string) (*uuid.UUID, error) {
	i := strings.LastIndexByte(caller, '/')
	if i <= 0 {
		return nil, nil
	}
	p, err := m.cfg.Store.Journey(ctx, caller[:i], caller[i+1:])
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // a configured caller with a "/" in its name
	}
	if err != nil {
		return nil, err
	}
	return &p.UID, nil
}

func (m *Manager) quota() store.Quota {
	return store.Quota{PerCaller: m.cfg.MaxJourneysPerCaller, Total: m.cfg.MaxJourneys}
}

// quotaRefused is err as the client sees it: a refused admission names the
// limit (and is logged, for the operator); anything else is returned as is.
func (m *Manager) quotaRefused(ctx context.Context, caller string, err error) error {
	var q *store.QuotaError
	if errors.As(err, &q) {
		m.logger.InfoContext(ctx, "spawn refused by quota", slog.String("caller", caller),
			slog.Bool("total", q.Total), slog.Int("live", q.Live), slog.Int("limit", q.Limit))
	}
	return quotaError(err)
}

// createRefused is a new journey's refused creation as the client sees it.
func (m *Manager) createRefused(ctx context.Context, caller, id string, err error) error {
	switch {
	case errors.Is(err, store.ErrExists):
		return conflict("journey %q is being spawned by another request", id)
	case errors.Is(err, store.ErrParentNotLive):
		return conflict("%v: its nested journeys stop with it", err)
	}
	return m.quotaRefused(ctx, caller, err)
}

// beginSpawn refuses a second concurrent spawn of one journey.
func (m *Manager) beginSpawn(uid uuid.UUID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.spawning[uid] {
		return conflict("this journey is already being spawned")
	}
	m.spawning[uid] = true
	return nil
}

func (m *Manager) endSpawn(uid uuid.UUID) {
	m.mu.Lock()
	delete(m.spawning, uid)
	m.mu.Unlock()
}

// spec turns a definition into what the runtime creates.
func (m *Manager) spec(uid uuid.UUID, d *meshtype.Definition) workerruntime.Spec {
	iso := d.Isolation
	s := workerruntime.Spec{
		Journey:        uid.String(),
		Worker:         d.ID,
		Image:          d.Image,
		User:           iso.User,
		Network:        string(iso.Network),
		ReadonlyRootfs: iso.ReadonlyRootfs,
		OCIRuntime:     iso.Runtime,
		CPUs:           iso.Resources.CPUs,
		MemoryBytes:    int64(iso.Resources.Memory),
		PIDs:           iso.Resources.PIDs,
		Labels:         m.cfg.Labels,
	}
	switch d.Kind {
	case meshtype.KindMCP:
		// The image's own command, its MCP server, is the main process, with
		// a silent stdin so it idles; channels exec mcp.command beside it, so
		// a broken channel never takes the worker down.
		s.KeepStdinOpen = true
		s.Init = true
	case meshtype.KindAgent:
		s.Cmd = []string{proctree.IdleCommand}
		// The agent CLI keeps its sessions under $HOME: on the workspace
		// volume, so they survive the container.
		s.Env = append([]string{"HOME=" + agentHome}, m.cfg.AgentEnv...)
	default:
		s.Cmd = []string{proctree.IdleCommand}
	}
	return s
}

// agentHome is the agent's home directory, on the workspace volume.
const agentHome = workerruntime.WorkspacePath + "/.meshwork/home"

// serverArgv is the command a channel runs in the worker: meshworker with the
// definition's limits, mesh-exec with its agent settings, or a kind: mcp
// image's server.
func serverArgv(e *workerdef.Entry) []string {
	d := &e.Definition
	switch d.Kind {
	case meshtype.KindMCP:
		return d.MCP.Command
	case meshtype.KindAgent:
		a := d.Agent
		argv := []string{MeshworkerPath, "serve", "--transport", "stdio", "--workspace-root", workerruntime.WorkspacePath, "--backend", a.Backend}
		if a.Model != "" {
			argv = append(argv, "--model", a.Model)
		}
		if len(a.AllowedTools) > 0 {
			argv = append(argv, "--allowed-tools", strings.Join(a.AllowedTools, ","))
		}
		if a.MaxTurns > 0 {
			argv = append(argv, "--max-turns", strconv.Itoa(a.MaxTurns))
		}
		if e.SystemPrompt != "" {
			argv = append(argv, "--append-system-prompt", e.SystemPrompt)
		}
		// The agent's own tool calls are checked against the same
		// definition by hooks inside the worker (mesh-exec hook).
		policy, err := json.Marshal(map[string]any{"workspace": workerruntime.WorkspacePath, "definition": d})
		if err != nil {
			policy = []byte("{}") // refused by mesh-exec at start: fail closed
		}
		argv = append(argv, "--gate-policy", string(policy))
		return append(argv, quotaArgs(d)...)
	}
	argv := []string{MeshworkerPath, "serve", "--root", workerruntime.WorkspacePath}
	if t := time.Duration(d.Constraints.ActionTimeout); t > 0 {
		argv = append(argv, "--exec-timeout", t.String())
	}
	if d.Constraints.MaxFileSize > 0 {
		argv = append(argv, "--max-file-size", strconv.FormatInt(int64(d.Constraints.MaxFileSize), 10))
	}
	if d.Constraints.Readonly {
		argv = append(argv, "--readonly")
	}
	argv = append(argv, quotaArgs(d)...)
	for _, t := range d.Tools {
		if t == string(meshtype.ActionExec) {
			argv = append(argv, "--allow-exec")
		}
	}
	// The gate checks the globs on the paths actions name; meshworker checks
	// them again on the paths those resolve to through symbolic links. One
	// argument each, so a glob that starts with "-" is never a flag.
	for _, g := range d.Constraints.AllowedPaths {
		argv = append(argv, "--allowed-path="+g)
	}
	for _, g := range d.Constraints.DeniedPaths {
		argv = append(argv, "--denied-path="+g)
	}
	return argv
}

// quotaArgs are the workspace quota flags, the same for meshworker and
// mesh-exec.
func quotaArgs(d *meshtype.Definition) []string {
	var argv []string
	if r := d.Isolation.Resources; r.Workspace > 0 {
		argv = append(argv, "--max-workspace-bytes", strconv.FormatInt(int64(r.Workspace), 10))
	}
	if r := d.Isolation.Resources; r.WorkspaceFiles > 0 {
		argv = append(argv, "--max-workspace-files", strconv.FormatInt(r.WorkspaceFiles, 10))
	}
	return argv
}

func handle(j store.Journey) workerruntime.Handle {
	return workerruntime.Handle{ID: j.ContainerID, Workspace: j.Workspace}
}

// checkLive reports whether a journey the store thinks live has a running
// worker. When the engine says its worker is not running, the journey is
// marked orphaned; without a worker or a runtime for its isolation level
// it is only reported not live (orphan marks it).
func (m *Manager) checkLive(ctx context.Context, j store.Journey) bool {
	rt, _, err := m.runtimeFor(j.IsolationLevel)
	if err != nil || j.ContainerID == "" {
		return false
	}
	st, err := rt.State(ctx, handle(j))
	if err != nil {
		m.logger.WarnContext(ctx, "checking worker state failed", slog.String("journey", j.UID.String()), slog.Any("error", err))
		return true // unknown: do not orphan on a transient error
	}
	if st == workerruntime.StateRunning {
		return true
	}
	if j.State != store.StateActive {
		// A spawn under way (whose worker is not recorded yet), or one a
		// dead marketplace left: the spawn records its worker, and
		// reconciliation (orphan) sweeps what is left, under the lock.
		return false
	}
	// Only if it is still this worker's live journey: a stop_worker may
	// have ended it while it was checked, or a spawn replaced its worker
	// (j was read without the journey's lock). The channel and the egress
	// grant (cleared by Orphan) go only then: a new worker's stay.
	if ok, err := m.cfg.Store.Orphan(ctx, j.UID, j.ContainerID, j.Spawns); err == nil && ok {
		m.dropChannel(j.UID)
		m.logger.WarnContext(ctx, "worker is gone; journey orphaned", slog.String("journey", j.UID.String()), slog.String("runtime_state", string(st)))
	}
	return false
}

func (m *Manager) dropChannel(uid uuid.UUID) { m.dropFrom(m.channels, uid) }

// dropFrom closes and forgets uid's channel in channels (m.channels or
// m.poolChannels, guarded by m.mu).
func (m *Manager) dropFrom(channels map[uuid.UUID]*channel, uid uuid.UUID) {
	m.mu.Lock()
	c := channels[uid]
	delete(channels, uid)
	m.mu.Unlock()
	if c != nil {
		c.close()
	}
}
