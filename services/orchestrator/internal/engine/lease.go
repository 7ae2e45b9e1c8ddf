package engine

import (
	"context"
	"log/slog"
	"sync"

	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// leaseTable holds the runs this replica is working on. Jobs of one run on
// this replica share the replica's lease: the first claims it in the
// database, the last gives it up in its commit. Each run's entry has its own
// mutex, so claim, commit and release of one run never interleave here.
type leaseTable struct {
	e        *Engine
	mu       sync.Mutex
	m        map[string]*runLease
	inflight map[string]chan struct{} // run/node/iteration being worked here; closed when done

	committed     map[string]struct{} // run/node/iteration committed here, recently
	committedRing []string
	committedNext int
}

type runLease struct {
	mu    sync.Mutex
	dead  bool // removed from the table; take a fresh entry
	refs  int
	fence int64
	run   store.Run
	// cancels stops the run's running nodes when the run is cancelled or
	// taken over.
	cancels map[*context.CancelFunc]struct{}
}

func newLeaseTable(e *Engine) *leaseTable {
	return &leaseTable{e: e, m: map[string]*runLease{}, inflight: map[string]chan struct{}{}, committed: map[string]struct{}{}}
}

// begin marks a node iteration as worked here; false if it already is.
func (t *leaseTable) begin(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.inflight[key]; ok {
		return false
	}
	t.inflight[key] = make(chan struct{})
	return true
}

// end marks a node iteration as no longer worked here, and wakes those
// waiting for it.
func (t *leaseTable) end(key string) {
	t.mu.Lock()
	if ch, ok := t.inflight[key]; ok {
		close(ch)
		delete(t.inflight, key)
	}
	t.mu.Unlock()
}

// await waits until no goroutine of this replica works on the node
// iteration.
func (t *leaseTable) await(ctx context.Context, key string) error {
	t.mu.Lock()
	ch := t.inflight[key]
	t.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// markCommitted remembers that this replica committed a node iteration, so
// that its River job, when it comes, ends without a query. The memory is
// bounded: a forgotten key only costs the job a look at the run's state.
func (t *leaseTable) markCommitted(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.committedRing) == committedMemory {
		delete(t.committed, t.committedRing[t.committedNext])
		t.committedRing[t.committedNext] = key
		t.committedNext = (t.committedNext + 1) % committedMemory
	} else {
		t.committedRing = append(t.committedRing, key)
	}
	t.committed[key] = struct{}{}
}

func (t *leaseTable) isCommitted(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.committed[key]
	return ok
}

// committedMemory is how many committed node iterations a replica
// remembers.
const committedMemory = 1 << 16

// lookup returns the run's entry, locked, or nil: unlike acquire it creates
// none.
func (t *leaseTable) lookup(runID string) *runLease {
	t.mu.Lock()
	l := t.m[runID]
	t.mu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return nil
	}
	return l
}

// acquire returns the run's entry, locked.
func (t *leaseTable) acquire(runID string) *runLease {
	for {
		t.mu.Lock()
		l := t.m[runID]
		if l == nil {
			l = &runLease{cancels: map[*context.CancelFunc]struct{}{}}
			t.m[runID] = l
		}
		t.mu.Unlock()
		l.mu.Lock()
		if !l.dead {
			return l
		}
		l.mu.Unlock()
	}
}

// remove drops a locked entry whose refs reached zero.
func (t *leaseTable) remove(runID string, l *runLease) {
	l.dead = true
	t.mu.Lock()
	if t.m[runID] == l {
		delete(t.m, runID)
	}
	t.mu.Unlock()
}

// claim takes a reference on the run's lease, claiming it in the database if
// this replica does not hold it yet. ok is false when another replica holds
// a live lease. When it claims in the database, it also returns the
// session of role on the run's thread (sessionKnown).
func (t *leaseTable) claim(ctx context.Context, runID, role string) (lease store.Lease, sessionKnown, ok bool, err error) {
	l := t.acquire(runID)
	defer l.mu.Unlock()
	if l.refs > 0 {
		l.refs++
		return store.Lease{Fence: l.fence, Run: l.run}, false, true, nil
	}
	lease, ok, err = store.ClaimLease(ctx, t.e.pool, runID, t.e.cfg.ReplicaID, t.e.cfg.LeaseTTL, role)
	if err != nil || !ok {
		t.remove(runID, l)
		return store.Lease{}, false, false, err
	}
	l.refs, l.fence, l.run = 1, lease.Fence, lease.Run
	return lease, true, true, nil
}

// adopt takes the first reference on the lease of a run this replica
// created with it (fence).
func (t *leaseTable) adopt(run store.Run, fence int64) {
	l := t.acquire(run.ID)
	defer l.mu.Unlock()
	l.refs++
	l.fence, l.run = fence, run
}

// release drops a reference; the last one gives the lease up.
func (t *leaseTable) release(ctx context.Context, runID string) {
	l := t.acquire(runID)
	defer l.mu.Unlock()
	if l.refs == 0 {
		t.remove(runID, l)
		return
	}
	l.refs--
	if l.refs == 0 {
		if err := store.ReleaseLease(context.WithoutCancel(ctx), t.e.pool, runID, t.e.cfg.ReplicaID, l.fence); err != nil {
			t.e.logger.WarnContext(ctx, "releasing a run's lease failed; it expires by itself", slog.String("run", runID), slog.Any("error", err))
		}
		t.remove(runID, l)
	}
}

// commit runs fn, the commit of one node of the run, under the run's entry
// lock; fn is told whether this is the last reference, and says whether
// the job keeps its reference (it goes on with the node's successor);
// otherwise the reference is dropped if fn succeeds.
func (t *leaseTable) commit(runID string, fn func(fence int64, last bool) (keep bool, err error)) error {
	l := t.acquire(runID)
	defer l.mu.Unlock()
	keep, err := fn(l.fence, l.refs <= 1)
	if err != nil || keep {
		return err
	}
	if l.refs > 0 {
		l.refs--
	}
	if l.refs == 0 {
		t.remove(runID, l)
	}
	return nil
}

// track registers a running node's cancel func with its run.
func (t *leaseTable) track(runID string, cancel *context.CancelFunc) func() {
	l := t.acquire(runID)
	l.cancels[cancel] = struct{}{}
	l.mu.Unlock()
	return func() {
		l := t.lookup(runID)
		if l == nil {
			return
		}
		delete(l.cancels, cancel)
		if l.refs == 0 {
			t.remove(runID, l)
		}
		l.mu.Unlock()
	}
}

// heartbeat renews this replica's leases every LeaseTTL/3, and stops the
// nodes of runs that were cancelled, ended, or taken over.
func (t *leaseTable) heartbeat(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	every(ctx, t.e.cfg.LeaseTTL/3, func() { t.renew(ctx) })
}

// renew renews this replica's leases once, and stops the nodes of the runs
// whose lease it no longer holds, or that no longer run.
func (t *leaseTable) renew(ctx context.Context) {
	// Which entry, with which fence, each run had when its lease was
	// renewed: a run whose lease was given up and claimed again since
	// (a new fence) is not the one the answer is about.
	type seen struct {
		l     *runLease
		fence int64
	}
	t.mu.Lock()
	snapshot := make(map[string]*runLease, len(t.m))
	for id, l := range t.m {
		snapshot[id] = l
	}
	t.mu.Unlock()
	ids := make([]string, 0, len(snapshot))
	entries := make(map[string]seen, len(snapshot))
	for id, l := range snapshot {
		l.mu.Lock()
		if !l.dead {
			ids = append(ids, id)
			entries[id] = seen{l, l.fence}
		}
		l.mu.Unlock()
	}
	if len(ids) == 0 {
		return
	}
	held, err := store.RenewLeases(ctx, t.e.pool, t.e.cfg.ReplicaID, ids, t.e.cfg.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			t.e.logger.WarnContext(ctx, "renewing leases failed", slog.Any("error", err))
		}
		return
	}
	for _, id := range ids {
		status, ok := held[id]
		if ok && status == runstate.RunRunning {
			continue
		}
		l := t.lookup(id)
		if l == nil {
			continue
		}
		if l == entries[id].l && l.fence == entries[id].fence && (l.refs > 0 || len(l.cancels) > 0) {
			t.e.logger.InfoContext(ctx, "stopping the run's nodes", slog.String("run", id), slog.String("status", status), slog.Bool("lease_lost", !ok))
			for c := range l.cancels {
				(*c)()
			}
		}
		l.mu.Unlock()
	}
}
