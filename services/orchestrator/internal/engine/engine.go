// Package engine runs pipelines durably. Work is handed out with River, a
// Postgres job queue: each ready node of a run is one job, and a node's
// result, its checkpoint, its role's new session and its successor jobs
// commit in one transaction, so a crash never loses or doubles a step.
//
// Several engines (orchestrator replicas) may share one database. A run has
// one writer at a time: a replica claims the run's lease before it works a
// node and renews it while the node runs; every claim raises the run's
// fencing token, and a commit must present the token it claimed with, so a
// replica that lost its lease (a long pause, a partition) cannot commit. A
// replica that dies holding a lease leaves River jobs in the running state;
// every replica's reaper finds those whose run has no live lease and
// inserts a takeover job (River refuses a second one with the same args), which resumes the node with the role's saved
// session. A late duplicate of a node's job finds the node's result already
// in the run's state and does nothing.
//
// A run is one trace. It keeps the W3C trace context of the request that
// created it, and each node attempt is a span under it ("invoke_agent
// {role}", or "node {id}" for an approval or a skipped node), whichever
// replica works it and however late: after a crash, a takeover or a wait for
// approval. The calls the executors make, and the database queries of the
// commit, are that span's children. Node outcomes go to OnCommit, which
// [Metrics] turns into Prometheus metrics.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
)

// Config configures an Engine.
type Config struct {
	// Pool is the database, migrated (migrations.Apply). Required.
	Pool *pgxpool.Pool
	// Catalog holds the pipelines runs may name. Required.
	Catalog *pipeline.Catalog
	// Executors run agent nodes, by their role's via. A role whose via has
	// no executor fails its node with a clear error. Defaults to none.
	Executors map[pipeline.Via]executor.Executor
	// ReplicaID names this engine in leases and attempts. A random suffix
	// is always added, so that a restarted replica with the same name never
	// passes for the process that held its leases before (and River's
	// client ids stay unique). Defaults to hostname-pid.
	ReplicaID string
	// LeaseTTL is how long a run's lease lasts without renewal, and so how
	// long a dead replica's runs wait before another takes them over.
	// Renewed every LeaseTTL/3. Defaults to 15s.
	LeaseTTL time.Duration
	// MaxWorkers bounds the nodes this engine works at once, those River
	// hands out and the first nodes of runs it starts itself (see
	// startChain). Defaults to 50.
	MaxWorkers int
	// FetchCooldown and FetchPollInterval tune how fast River hands out a
	// new job (see river.Config). Default to 2ms and 200ms.
	FetchCooldown, FetchPollInterval time.Duration
	// ReapInterval is how often the reaper looks for jobs of dead replicas.
	// Defaults to LeaseTTL/2.
	ReapInterval time.Duration
	// WorkDisabled makes the engine an API only: it inserts jobs but works
	// none (for tests and for API-only replicas). Defaults to false.
	WorkDisabled bool
	// OnCommit, when set, is called after each node's outcome commits (an
	// attempt's result, an approval's decision, a node skipped), for
	// metrics (Metrics.Observe) and tests. It must not block. Defaults to
	// none.
	OnCommit func(CommitInfo)
	// Logger receives operational logs. Defaults to discarding them.
	Logger *slog.Logger
}

// CommitInfo describes one committed node outcome.
type CommitInfo struct {
	RunID, NodeID string
	// Pipeline is the run's pipeline, as the catalog names it.
	Pipeline string
	// Status is the node's outcome: succeeded, failed (for good), retry (the
	// attempt failed and the node runs again) or skipped (the node will not
	// run: no attempt, no duration).
	Status string
	// RunStatus is the run's status after the commit.
	RunStatus string
	// Attempt is the attempt's number, from 1.
	Attempt int
	// Duration is how long the node's attempt ran; CommitDuration how long
	// its transaction took.
	Duration, CommitDuration time.Duration
}

// Engine runs pipelines. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	pool    *pgxpool.Pool
	catalog *pipeline.Catalog
	logger  *slog.Logger
	river   *river.Client[pgx.Tx]
	leases  *leaseTable
	cache   *stateCache

	stopHeartbeat context.CancelFunc
	heartbeatDone chan struct{}
	reaperDone    chan struct{}
	releaseDone   chan struct{}

	// chains work the first nodes of the runs this replica creates, without
	// a River job (see startChain).
	chains chainSet

	// exports holds a token per workspace export under way
	// (ExportWorkspace): each holds its content, up to 32 MiB, in memory.
	exports chan struct{}
}

// chainSet is the chains of nodes the engine works outside River's jobs,
// only between Start and Stop.
type chainSet struct {
	// slots bounds the nodes the engine works at once (MaxWorkers),
	// River's jobs and the chains alike: each holds one while it works.
	slots  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	open   bool
	ctx    context.Context //nolint:containedctx // the chains' context, cancelled by Stop
	cancel context.CancelFunc
}

// acquire takes a slot for a chain, if one is free and the engine works
// nodes.
func (c *chainSet) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		return false
	}
	select {
	case c.slots <- struct{}{}:
		c.wg.Add(1)
		return true
	default:
		return false
	}
}

// done gives a chain's slot back.
func (c *chainSet) done() {
	<-c.slots
	c.wg.Done()
}

// stop takes no more chains and waits for the running ones until ctx ends,
// then cancels them and waits for them to give their nodes up.
func (c *chainSet) stop(ctx context.Context) {
	c.mu.Lock()
	c.open = false
	cancel := c.cancel
	c.mu.Unlock()
	if cancel == nil {
		return // never started
	}
	finished := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		cancel()
		// Bounded like River's StopAndCancel: a chain that ignores its
		// cancellation is left to its lease, which expires.
		select {
		case <-finished:
		case <-time.After(stopWait):
		}
	}
	cancel()
}

// stopWait is how long Stop waits for the nodes it cancelled, River's and
// the chains', to give their nodes up.
const stopWait = 10 * time.Second

// PoolSize is the connections an engine working maxWorkers nodes at once
// (0: the default) needs in its pool. Each node worked holds a connection at
// times (its commit, its lease renewals), beside River's producer, leader
// and notifier, the event streams' polls and the API's handlers: the
// workers plus a margin, so that a full replica does not wait for
// connections (pgx's default is max(4, CPUs)).
func PoolSize(maxWorkers int) int32 {
	const margin = 10
	if maxWorkers <= 0 {
		maxWorkers = defaultMaxWorkers
	}
	return int32(min(maxWorkers, math.MaxInt32-margin) + margin)
}

// defaultMaxWorkers is Config.MaxWorkers's default.
const defaultMaxWorkers = 50

// New checks cfg and returns an Engine; Start starts its workers.
func New(cfg Config) (*Engine, error) {
	if cfg.Pool == nil || cfg.Catalog == nil {
		return nil, errors.New("engine: Pool and Catalog are required")
	}
	if cfg.ReplicaID == "" {
		host, _ := os.Hostname()
		cfg.ReplicaID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	cfg.ReplicaID += "-" + randomHex(4)
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 15 * time.Second
	}
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = defaultMaxWorkers
	}
	if cfg.FetchCooldown <= 0 {
		cfg.FetchCooldown = 2 * time.Millisecond
	}
	if cfg.FetchPollInterval <= 0 {
		cfg.FetchPollInterval = 200 * time.Millisecond
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = cfg.LeaseTTL / 2
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{cfg: cfg, pool: cfg.Pool, catalog: cfg.Catalog, logger: logger, cache: newStateCache(4096), exports: make(chan struct{}, maxExports)}
	e.chains.slots = make(chan struct{}, cfg.MaxWorkers)
	e.leases = newLeaseTable(e)

	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &nodeWorker{e: e}); err != nil {
		return nil, err
	}
	rc := &river.Config{
		ID:                cfg.ReplicaID,
		Logger:            logger,
		Workers:           workers,
		FetchCooldown:     cfg.FetchCooldown,
		FetchPollInterval: cfg.FetchPollInterval,
		// Nodes bound their own time (the node's timeout); River must not.
		JobTimeout: -1,
		// River cannot tell a long node from a dead replica's; the reaper
		// takes over dead replicas' jobs within a lease's time, so River's
		// own rescue is only a backstop, far beyond any node's timeout.
		RescueStuckJobsAfter: 24 * time.Hour,
		// A node job's own failures are retried by the engine under the
		// node's retry policy; River's retries cover the engine's own
		// transient errors (the database, a stale lease).
		MaxAttempts: 25,
	}
	if !cfg.WorkDisabled {
		rc.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.MaxWorkers}}
	}
	client, err := river.NewClient(riverpgxv5.New(cfg.Pool), rc)
	if err != nil {
		return nil, fmt.Errorf("creating the River client: %w", err)
	}
	e.river = client
	return e, nil
}

// ReplicaID returns the engine's replica id.
func (e *Engine) ReplicaID() string { return e.cfg.ReplicaID }

// Start starts working jobs (unless WorkDisabled) and renewing leases.
func (e *Engine) Start(ctx context.Context) error {
	if e.cfg.WorkDisabled {
		return nil
	}
	if err := e.river.Start(ctx); err != nil {
		return fmt.Errorf("starting River: %w", err)
	}
	hbCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.stopHeartbeat = cancel
	e.chains.mu.Lock()
	e.chains.ctx, e.chains.cancel = context.WithCancel(context.WithoutCancel(ctx))
	e.chains.open = true
	e.chains.mu.Unlock()
	e.heartbeatDone = make(chan struct{})
	e.reaperDone = make(chan struct{})
	go e.leases.heartbeat(hbCtx, e.heartbeatDone)
	go e.reapLoop(hbCtx, e.reaperDone)
	e.releaseDone = make(chan struct{})
	go e.releaseLoop(hbCtx, e.releaseDone)
	e.logger.InfoContext(ctx, "engine started", slog.String("replica", e.cfg.ReplicaID))
	return nil
}

// Stop stops taking jobs, waits for running nodes until ctx ends, then
// cancels them; their jobs are retried by River or taken over.
func (e *Engine) Stop(ctx context.Context) error {
	if e.cfg.WorkDisabled {
		return nil
	}
	// River's jobs and the engine's own chains stop side by side, each
	// given until ctx ends to finish their nodes.
	chainsStopped := make(chan struct{})
	go func() {
		defer close(chainsStopped)
		e.chains.stop(ctx)
	}()
	err := e.river.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopWait)
		err = e.river.StopAndCancel(stopCtx)
		cancel()
	}
	<-chainsStopped
	if e.stopHeartbeat != nil {
		e.stopHeartbeat()
		<-e.heartbeatDone
		<-e.reaperDone
		<-e.releaseDone
	}
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stateCache keeps the state at each run's head on this replica, so that a
// commit replays the checkpoint chain only when another writer moved the
// head.
type stateCache struct {
	mu    sync.Mutex
	limit int
	m     map[string]cachedState
}

type cachedState struct {
	seq   int
	state runstate.State
}

func newStateCache(limit int) *stateCache {
	return &stateCache{limit: limit, m: map[string]cachedState{}}
}

// latest returns the run's cached head and its state, if any.
func (c *stateCache) latest(run string) (int, runstate.State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[run]
	if !ok {
		return 0, runstate.State{}, false
	}
	return s.seq, s.state.Clone(), true
}

func (c *stateCache) get(run string, seq int) (runstate.State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[run]
	if !ok || s.seq != seq {
		return runstate.State{}, false
	}
	return s.state.Clone(), true
}

// put keeps st as the run's state at seq, unless the cache holds a later
// head: seqs only grow in a run, and a node that reads an older head (a
// parallel branch, its lease claimed before another branch committed) must
// not take the cache back, or every commit after it would be decided over
// that old head and miss the one-round-trip path.
func (c *stateCache) put(run string, seq int, st runstate.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[run]; ok && s.seq > seq {
		return
	}
	if len(c.m) >= c.limit {
		for k := range c.m { // drop an arbitrary entry: a miss only costs a replay
			delete(c.m, k)
			break
		}
	}
	c.m[run] = cachedState{seq: seq, state: st}
}

func (c *stateCache) drop(run string) {
	c.mu.Lock()
	delete(c.m, run)
	c.mu.Unlock()
}
