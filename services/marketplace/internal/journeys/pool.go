package journeys

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// Warm pools. A definition's pool (or the operator's size for it) keeps
// workers created, started and hardened exactly as a spawn makes them, each
// with a fresh empty workspace, under a uid of their own that no journey
// has. spawn_worker of a new journey claims one: the claim deletes the
// member's row and inserts the journey's, under the member's uid, in one
// transaction, so that two spawns (on any marketplace of the database)
// never get the same member and the worker's name, labels and workspace
// are the journey's from then on. A member is never given back: a journey
// that had it stops it like any other.
//
// Each member's journey lock (of its uid) is held while it is created and
// while it is claimed, which is how reconciliation on another marketplace
// tells a member under way from a dead one's leftovers.

// LabelPool marks a worker created for a pool (its value is the worker
// id). The label stays after a claim; the journey's row says whose it is.
const LabelPool = "meshwork.pool"

// DefaultMaxPoolMembers bounds all pools together when the operator sets
// no bound.
const DefaultMaxPoolMembers = 16

// claimCandidates is how many ready members a claim tries before it falls
// back to a cold spawn: another spawn may take each one first.
const claimCandidates = 4

// poolRefill is how often pools are refilled and their expired members
// replaced when no claim wakes the refiller first.
const poolRefill = 30 * time.Second

// pool is one worker's pool as configured: size members of at most maxAge.
type pool struct {
	size   int
	maxAge time.Duration
}

// poolOf is entry's pool on this marketplace: the operator's size for it
// (PoolSizes) or else the definition's.
func (m *Manager) poolOf(entry *workerdef.Entry) (pool, bool) {
	d := &entry.Definition
	size := d.Pool.Size
	if n, ok := m.cfg.PoolSizes[d.ID]; ok {
		size = n
	}
	if size <= 0 || d.Abstract || d.Isolation.Level != meshtype.IsolationContainer || m.cfg.Runtimes[meshtype.IsolationContainer] == nil {
		return pool{}, false
	}
	return pool{size: size, maxAge: time.Duration(d.Pool.MaxAge)}, true
}

// claimPooled hands a ready member of entry's pool to a new journey of
// caller, as store.ClaimPoolMember. ok is false when none could be had
// (the pool is empty or others took its members first): the spawn is
// then cold. On success the journey's lock is held; unlock releases it.
func (m *Manager) claimPooled(ctx context.Context, caller, journeyID string, entry *workerdef.Entry, level meshtype.IsolationLevel, parent *uuid.UUID) (j store.Journey, unlock func(), ok bool, err error) {
	p, pooled := m.poolOf(entry)
	if !pooled || level != meshtype.IsolationContainer {
		return store.Journey{}, nil, false, nil
	}
	candidates, err := m.cfg.Store.ReadyPoolMembers(ctx, entry.Definition.ID, m.memberHash(entry), string(level), p.maxAge, claimCandidates)
	if err != nil {
		return store.Journey{}, nil, false, err
	}
	rt := m.cfg.Runtimes[level]
	for _, c := range candidates {
		unlock, locked, err := m.tryLockJourneyForWork(ctx, c.UID)
		if err != nil {
			return store.Journey{}, nil, false, err
		}
		if !locked {
			continue // another spawn is claiming it
		}
		h := workerruntime.Handle{ID: c.ContainerID, Workspace: c.Workspace}
		st, err := rt.State(ctx, h)
		if err != nil || st != workerruntime.StateRunning {
			if err == nil {
				// A member whose worker died is removed, never handed out;
				// one the engine could not report on is left for later.
				m.retireMember(ctx, rt, c, "its worker is not running")
			}
			unlock()
			continue
		}
		j, err = m.cfg.Store.ClaimPoolMember(ctx, c.UID, store.Journey{
			Caller: caller, ID: journeyID, WorkerID: entry.Definition.ID, DefinitionHash: entry.Hash,
			IsolationLevel: string(level), ParentJourney: parent,
		}, m.quota(), m.nestedAgent(entry))
		if errors.Is(err, store.ErrPoolMemberStale) {
			m.retireMember(ctx, rt, c, "it was made without the agent token nested access needs")
		}
		if errors.Is(err, store.ErrPoolMemberGone) || errors.Is(err, store.ErrPoolMemberStale) {
			unlock()
			continue
		}
		if err != nil {
			unlock()
			return store.Journey{}, nil, false, err
		}
		return j, unlock, true, nil
	}
	return store.Journey{}, nil, false, nil
}

// adoptPoolChannel makes the channel this marketplace opened to a pool
// member, if any, its journey's.
func (m *Manager) adoptPoolChannel(uid uuid.UUID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.poolChannels[uid]; c != nil {
		delete(m.poolChannels, uid)
		m.channels[uid] = c
	}
}

// wakePools asks the refiller to top the pools up now.
func (m *Manager) wakePools() {
	select {
	case m.poolWake <- struct{}{}:
	default:
	}
}

// RunPools keeps the pools filled until ctx ends: at once, after every
// claim, and every poolRefill. Members are left running when it ends:
// the next marketplace to start reconciles them.
func (m *Manager) RunPools(ctx context.Context) {
	t := time.NewTicker(poolRefill)
	defer t.Stop()
	for {
		if err := m.FillPools(ctx); err != nil && ctx.Err() == nil {
			m.logger.WarnContext(ctx, "refilling the warm pools failed", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.poolWake:
		}
	}
}

// FillPools replaces expired or outdated members and creates members until
// every pool has its size or all pools together reach MaxPoolMembers.
func (m *Manager) FillPools(ctx context.Context) error {
	if err := m.trimPools(ctx); err != nil {
		return err
	}
	rt := m.cfg.Runtimes[meshtype.IsolationContainer]
	var errs []error
	for _, e := range m.cfg.Catalog.Entries() {
		p, ok := m.poolOf(e)
		if !ok {
			continue
		}
		for ctx.Err() == nil {
			made, err := m.createMember(ctx, rt, e, p)
			if err != nil {
				errs = append(errs, fmt.Errorf("creating a member of %s's pool: %w", e.Definition.ID, err))
				break // the next pass tries again
			}
			if !made {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// trimPools removes the members no pool wants any more: past their
// maxAge, of a definition that changed or lost its pool, beyond their
// pool's size, or left half-made by a maker that died. It also closes
// channels this marketplace opened to members
// that another marketplace has claimed since.
func (m *Manager) trimPools(ctx context.Context) error {
	members, err := m.cfg.Store.PoolMembers(ctx)
	if err != nil {
		return err
	}
	ready := map[uuid.UUID]bool{}
	kept := map[string]int{}
	rt := m.cfg.Runtimes[meshtype.IsolationContainer]
	for _, mem := range members {
		if !mem.Ready {
			// Its maker holds its lock while it lives: a member whose lock
			// is free lost its maker, and its worker (if any) goes.
			m.retireIfFree(ctx, rt, mem.UID, "its maker died before it was ready", func(cur store.PoolMember) bool { return !cur.Ready })
			continue
		}
		ready[mem.UID] = true
		reason := ""
		e, found := m.cfg.Catalog.Lookup(mem.WorkerID)
		p, pooled := pool{}, false
		if found {
			p, pooled = m.poolOf(e)
		}
		switch {
		case !pooled:
			reason = "its worker has no pool any more"
		case m.memberHash(e) != mem.DefinitionHash:
			reason = "its worker's definition, or the settings it was made with, changed"
		case time.Since(mem.CreatedAt) > p.maxAge:
			reason = "it is older than the pool's max_age"
		case kept[mem.WorkerID] >= p.size:
			reason = "its pool is above its size"
		}
		if reason == "" {
			kept[mem.WorkerID]++
			continue
		}
		m.retireIfFree(ctx, rt, mem.UID, reason, func(store.PoolMember) bool { return true })
	}
	m.mu.Lock()
	var stale []*channel
	for uid, c := range m.poolChannels {
		if !ready[uid] {
			stale = append(stale, c)
			delete(m.poolChannels, uid)
		}
	}
	m.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
	return nil
}

// DrainPools removes every ready pool member that no claim holds, for a
// marketplace that stops, and returns how many it removed. A member being
// made is its maker's; one whose maker died is reconciled at the next
// start.
func (m *Manager) DrainPools(ctx context.Context) (int, error) {
	rt := m.cfg.Runtimes[meshtype.IsolationContainer]
	if rt == nil {
		return 0, nil
	}
	members, err := m.cfg.Store.PoolMembers(ctx)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, mem := range members {
		if mem.Ready && ctx.Err() == nil &&
			m.retireIfFree(ctx, rt, mem.UID, "the marketplace is stopping", func(cur store.PoolMember) bool { return cur.Ready }) {
			removed++
		}
	}
	return removed, ctx.Err()
}

// retireIfFree removes pool member uid if its lock is free (no maker or
// claim holds it) and remove, given the member as read again under the
// lock, says so. It reports whether the member was removed. rt nil (no
// container runtime) removes nothing.
func (m *Manager) retireIfFree(ctx context.Context, rt workerruntime.Runtime, uid uuid.UUID, reason string, remove func(store.PoolMember) bool) bool {
	if rt == nil {
		return false
	}
	unlock, ok, err := m.tryLockJourney(ctx, uid)
	if err != nil || !ok {
		return false
	}
	defer unlock()
	cur, err := m.cfg.Store.PoolMember(ctx, uid)
	if err != nil || !remove(cur) {
		return false // claimed or removed meanwhile, or to keep
	}
	return m.retireMember(ctx, rt, cur, reason)
}

// retireMember removes a member: its worker first, then its row, so that
// a worker the engine would not remove keeps its row, and a later pass
// (the trim, a claim that finds it dead, reconciliation) tries again. The
// caller holds the member's lock, so no claim takes it meanwhile.
func (m *Manager) retireMember(ctx context.Context, rt workerruntime.Runtime, mem store.PoolMember, reason string) bool {
	m.dropPoolChannel(mem.UID)
	m.logger.InfoContext(ctx, "removing a pool member", slog.String("member", mem.UID.String()), slog.String("worker", mem.WorkerID), slog.String("reason", reason))
	handles := []workerruntime.Handle{{ID: mem.ContainerID, Workspace: mem.Workspace}}
	if mem.ContainerID == "" && mem.Workspace == "" {
		// Not recorded (its maker died, or failed to record it and to
		// remove it): found by its label, if it was made at all.
		listed, err := rt.List(ctx, m.journeyLabels(mem.UID))
		if err != nil {
			m.logger.WarnContext(ctx, "listing a pool member's worker failed; it is tried again later", slog.String("member", mem.UID.String()), slog.Any("error", err))
			return false
		}
		handles = handles[:0]
		for _, w := range listed {
			handles = append(handles, w.Handle)
		}
	}
	for _, h := range handles {
		if err := rt.Remove(context.WithoutCancel(ctx), h, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			m.logger.WarnContext(ctx, "removing a pool member failed; it is tried again later", slog.String("member", mem.UID.String()), slog.Any("error", err))
			return false
		}
	}
	if ok, err := m.cfg.Store.DeletePoolMember(ctx, mem.UID); err != nil || !ok {
		return false // the database is away: the row is left for the next pass, its worker gone
	}
	if err := m.cfg.Bases.Remove(mem.UID); err != nil {
		m.logger.WarnContext(ctx, "removing a pool member's base failed", slog.String("member", mem.UID.String()), slog.Any("error", err))
	}
	return true
}

func (m *Manager) dropPoolChannel(uid uuid.UUID) { m.dropFrom(m.poolChannels, uid) }

// createMember reserves one more member of entry's pool, if the pool and
// the cap have room (made is false if not), creates its worker as a spawn
// would, seeds its workspace with the empty base (what a spawn without a
// source gets), then opens this marketplace's channel to it so that the
// journey that claims it here pays nothing for its first action.
func (m *Manager) createMember(ctx context.Context, rt workerruntime.Runtime, entry *workerdef.Entry, p pool) (made bool, err error) {
	uid := uuid.New()
	unlock, err := m.lockJourney(ctx, uid)
	if err != nil {
		return false, err
	}
	defer unlock()
	mem := store.PoolMember{UID: uid, WorkerID: entry.Definition.ID, DefinitionHash: m.memberHash(entry), IsolationLevel: string(meshtype.IsolationContainer)}
	if ok, err := m.cfg.Store.ReservePoolMember(ctx, mem, p.size, m.cfg.MaxPoolMembers); err != nil || !ok {
		return false, err
	}
	spec := m.spec(uid, &entry.Definition)
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[LabelPool] = entry.Definition.ID
	if entry.Definition.Isolation.Network == meshtype.NetworkEgress {
		if err := m.egressSpec(ctx, rt, &spec); err != nil {
			_, _ = m.cfg.Store.DeletePoolMember(context.WithoutCancel(ctx), uid)
			return false, err
		}
	}
	if m.nestedAgent(entry) {
		// The agent's token is in its environment from the start, held
		// inactive and nobody's until the claim gives it its journey's
		// caller (store.ClaimPoolMember).
		token, env, err := m.nestedConfig()
		if err == nil {
			err = m.cfg.Store.PutPoolToken(ctx, uid, bearer.Hash(token))
		}
		if err != nil {
			_, _ = m.cfg.Store.DeletePoolMember(context.WithoutCancel(ctx), uid)
			return false, err
		}
		spec.Env = append(spec.Env, env)
	}
	started := time.Now()
	h, err := rt.Create(ctx, spec)
	if err != nil {
		_, _ = m.cfg.Store.DeletePoolMember(context.WithoutCancel(ctx), uid)
		return false, err
	}
	// A worker the engine would not remove keeps its row (not ready, its
	// lock free once this returns): the next trim retires it.
	cleanup := func() {
		if err := rt.Remove(context.WithoutCancel(ctx), h, workerruntime.RemoveOptions{Workspace: true}); err != nil {
			m.logger.WarnContext(ctx, "removing a pool member that failed to be made; it is tried again later", slog.String("member", uid.String()), slog.Any("error", err))
			return
		}
		_, _ = m.cfg.Store.DeletePoolMember(context.WithoutCancel(ctx), uid)
		_ = m.cfg.Bases.Remove(uid)
	}
	if err := m.cfg.Store.PoolMemberCreated(context.WithoutCancel(ctx), uid, h.ID, h.Workspace); err != nil {
		cleanup()
		return false, err
	}
	// Seeded as a spawn without a source seeds: the claim of such a spawn
	// then has nothing left to do but record it.
	empty, err := m.prepareSource(ctx, "", nil)
	if err != nil {
		cleanup()
		return false, err
	}
	base, err := m.seedWorkspace(ctx, rt, h, uid, &entry.Definition, empty)
	if err != nil {
		cleanup()
		return false, err
	}
	c, err := openChannel(ctx, rt, h, serverArgv(entry), frameLimit(&entry.Definition))
	if err != nil {
		cleanup()
		return false, err
	}
	m.mu.Lock()
	m.poolChannels[uid] = c
	m.mu.Unlock()
	if err := m.cfg.Store.PoolMemberReady(context.WithoutCancel(ctx), uid, h.ID, h.Workspace, base.Commit.String()); err != nil {
		m.dropPoolChannel(uid)
		cleanup()
		return false, err
	}
	m.logger.InfoContext(ctx, "pool member ready", slog.String("member", uid.String()), slog.String("worker", entry.Definition.ID), slog.Duration("took", time.Since(started)))
	return true, nil
}

// reconcilePoolWorker decides, under the uid's lock, about a listed worker
// that no journey has: a ready pool member's running worker is kept (the
// pool reuses it); anything else, a dead member's or the leftovers of a
// marketplace that died creating one, is removed with its workspace. It
// reports whether the worker was kept.
func (m *Manager) reconcilePoolWorker(ctx context.Context, rt workerruntime.Runtime, uid uuid.UUID, w workerruntime.Listed) bool {
	mem, err := m.cfg.Store.PoolMember(ctx, uid)
	switch {
	case errors.Is(err, store.ErrPoolMemberGone):
		// No journey and no member: a member whose maker died after
		// making its worker, or one removed from the database. Its base
		// goes with its worker.
		if w.Worker != "" {
			_ = m.cfg.Bases.Remove(uid)
		}
		return false
	case err != nil:
		m.logger.WarnContext(ctx, "leaving a worker: its pool member could not be read", slog.String("id", w.ID), slog.Any("error", err))
		return true
	case mem.Ready && mem.ContainerID == w.ID && w.State == workerruntime.StateRunning:
		return true
	}
	// Its maker is gone (the lock was free) or its worker is not running.
	if _, err := m.cfg.Store.DeletePoolMember(ctx, uid); err != nil {
		return true
	}
	m.logger.InfoContext(ctx, "removing a pool member without a running worker", slog.String("member", uid.String()))
	_ = m.cfg.Bases.Remove(uid)
	return false
}

// reconcilePoolRows removes the pool members whose worker Reconcile did not
// find: a member is a row and a running worker, or nothing.
func (m *Manager) reconcilePoolRows(ctx context.Context, listed map[uuid.UUID]bool) error {
	members, err := m.cfg.Store.PoolMembers(ctx)
	if err != nil {
		return err
	}
	rt := m.cfg.Runtimes[meshtype.IsolationContainer]
	for _, mem := range members {
		if listed[mem.UID] {
			continue
		}
		// A member made since the listing has a running worker now; one
		// still creating whose lock was free lost its maker.
		m.retireIfFree(ctx, rt, mem.UID, "its worker is gone", func(cur store.PoolMember) bool { return !cur.Ready || !m.running(ctx, rt, cur) })
	}
	return nil
}

// running reports whether a member's worker runs; an error counts as
// running, so that a passing fault of the engine removes nothing.
func (m *Manager) running(ctx context.Context, rt workerruntime.Runtime, mem store.PoolMember) bool {
	st, err := rt.State(ctx, workerruntime.Handle{ID: mem.ContainerID, Workspace: mem.Workspace})
	return err != nil || st == workerruntime.StateRunning
}

// memberHash is what a pool member of entry is made from: the definition
// (its hash) and the marketplace's settings that go into the member's
// container (labels; for agents, their environment, credentials included,
// and the nested MCP URL; for egress workers, the network and the proxy).
// A member made under other settings has another hash, so it is never
// claimed, and the refill retires it as one of a changed definition: a
// restart with new credentials hands out no member with the old ones.
func (m *Manager) memberHash(entry *workerdef.Entry) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "definition %s\n", entry.Hash)
	for _, k := range slices.Sorted(maps.Keys(m.cfg.Labels)) {
		_, _ = fmt.Fprintf(h, "label %q=%q\n", k, m.cfg.Labels[k])
	}
	if entry.Definition.Kind == meshtype.KindAgent {
		for _, e := range m.cfg.AgentEnv {
			_, _ = fmt.Fprintf(h, "env %q\n", e)
		}
		if m.nestedAgent(entry) {
			_, _ = fmt.Fprintf(h, "nested %q\n", m.cfg.NestedMCPURL)
		}
	}
	if entry.Definition.Isolation.Network == meshtype.NetworkEgress {
		_, _ = fmt.Fprintf(h, "egress %q %q %d %q\n", m.cfg.EgressNetwork, m.cfg.EgressProxyHost, m.cfg.EgressProxyPort, m.cfg.EgressNoProxy)
	}
	return hex.EncodeToString(h.Sum(nil))
}
