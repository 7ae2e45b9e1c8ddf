package journeys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/egress"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// DefaultEgressNetwork is the internal network egress workers join.
const DefaultEgressNetwork = "meshwork-egress"

// AuditTypeEgress is the action_type of an egress connection's audit row.
const AuditTypeEgress = "egress"

// egressSpec puts an egress worker on the internal network, with the proxy
// in its environment. It fails when this marketplace has no proxy or the
// runtime has no internal networks (the process runtime).
func (m *Manager) egressSpec(ctx context.Context, rt workerruntime.Runtime, spec *workerruntime.Spec) error {
	nw, ok := rt.(workerruntime.Networker)
	if !ok || m.cfg.Egress == nil {
		return unavailable("egress workers need the Docker runtime and the marketplace's egress proxy (--egress-proxy-addr)")
	}
	unlock, err := m.cfg.Store.LockNetwork(ctx, m.cfg.EgressNetwork)
	if err != nil {
		return unavailable("preparing the egress network: %v", err)
	}
	gateway, err := nw.EnsureInternalNetwork(ctx, m.cfg.EgressNetwork, m.cfg.Labels)
	unlock()
	if err != nil {
		return unavailable("preparing the egress network: %v", err)
	}
	host := m.cfg.EgressProxyHost
	if host == "" {
		host = gateway
	}
	proxy := "http://" + net.JoinHostPort(host, strconv.Itoa(m.cfg.EgressProxyPort))
	spec.Network = m.cfg.EgressNetwork
	spec.Env = append(spec.Env,
		"HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "http_proxy="+proxy, "https_proxy="+proxy,
		"NO_PROXY="+m.cfg.EgressNoProxy, "no_proxy="+m.cfg.EgressNoProxy)
	return nil
}

// egressGrant lets a started egress worker through the proxy, to its
// list: its address on the egress network is recorded with the journey,
// where every marketplace's proxy finds it (egressGrantOf).
func (m *Manager) egressGrant(ctx context.Context, rt workerruntime.Runtime, h workerruntime.Handle, uid uuid.UUID) error {
	nw, ok := rt.(workerruntime.Networker)
	if !ok || m.cfg.Egress == nil {
		return fmt.Errorf("no egress proxy")
	}
	addr, err := nw.Address(ctx, h, m.cfg.EgressNetwork)
	if err != nil {
		return err
	}
	return m.cfg.Store.SetEgressAddr(ctx, uid, addr)
}

// egressRevoke withdraws a journey's grant, if it has one: its worker is
// gone or going.
func (m *Manager) egressRevoke(uid uuid.UUID) {
	if m.cfg.Egress == nil {
		return
	}
	if err := m.cfg.Store.ClearEgressAddr(context.Background(), uid); err != nil && !errors.Is(err, store.ErrNotFound) {
		m.logger.Warn("forgetting an egress worker's address failed", slog.String("journey", uid.String()), slog.Any("error", err))
	}
}

// egressGrantOf is the proxy's grant of the worker at addr: that of the
// live egress journey whose worker has the address, by its worker's
// definition in the catalog; nil for any other address.
func (m *Manager) egressGrantOf(ctx context.Context, addr string) (*egress.Grant, error) {
	j, err := m.cfg.Store.EgressJourney(ctx, addr)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e, ok := m.cfg.Catalog.Lookup(j.WorkerID)
	if !ok || e.Definition.Isolation.Network != meshtype.NetworkEgress {
		return nil, nil
	}
	return &egress.Grant{Journey: j.UID.String(), Allowed: e.Definition.Isolation.Egress}, nil
}

// AuditEgress writes an egress proxy's record as an audit row of the
// journey it names (refusals of addresses that are no journey's are
// logged only). It is the proxy's Audit callback.
func (m *Manager) AuditEgress(rec egress.Record) {
	ctx := context.Background()
	log := m.logger.With(slog.String("host", rec.Host), slog.Int("port", rec.Port), slog.Bool("allowed", rec.Allowed), slog.String("source", rec.Source))
	uid, err := uuid.Parse(rec.Journey)
	if err != nil {
		log.WarnContext(ctx, "egress refused for an address that is no journey's", slog.String("reason", rec.Reason))
		return
	}
	if !rec.Allowed && !m.egressRefusals.allow(uid, time.Now()) {
		// A worker hammering refused hosts must not flood the audit log:
		// past the limit its refusals are counted in the log only.
		log.WarnContext(ctx, "egress refusal not audited: over the journey's limit of audited refusals a minute", slog.String("journey", rec.Journey))
		return
	}
	j, err := m.cfg.Store.JourneyByUID(ctx, uid)
	if err != nil {
		log.ErrorContext(ctx, "auditing an egress connection: the journey is unknown", slog.String("journey", rec.Journey), slog.Any("error", err))
		return
	}
	r := store.ActionRecord{
		JourneyUID: j.UID, Caller: j.Caller, WorkerID: j.WorkerID, DefinitionHash: j.DefinitionHash,
		ActionType: AuditTypeEgress, Target: net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port)),
		Decision: store.DecisionAllowed, Duration: rec.Duration, RequestBytes: rec.Sent, ResponseBytes: rec.Received,
		Uncounted: true,
	}
	switch {
	case !rec.Allowed:
		r.Decision = store.DecisionRefused
		r.Violations = []meshtype.Violation{{ConstraintID: "egress", Violated: true, Message: rec.Reason}}
	case rec.Reason != "":
		r.Decision, r.Error = store.DecisionFailed, rec.Reason
	}
	if err := m.cfg.Store.RecordAction(ctx, r); err != nil {
		log.ErrorContext(ctx, "writing the egress audit row failed", slog.String("journey", rec.Journey), slog.Any("error", err))
	}
}

// maxAuditedRefusals bounds the egress refusals audited per journey and
// minute.
const maxAuditedRefusals = 60

// refusalLimiter counts audited egress refusals per journey and minute.
type refusalLimiter struct {
	mu     sync.Mutex
	window time.Time
	counts map[uuid.UUID]int
}

func (l *refusalLimiter) allow(uid uuid.UUID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.window) >= time.Minute || l.counts == nil {
		l.window, l.counts = now, map[uuid.UUID]int{}
	}
	l.counts[uid]++
	return l.counts[uid] <= maxAuditedRefusals
}

// regrantEgress gives the proxy a running egress worker's grant again:
// after a restart of the marketplace, or a stop that failed to remove the
// worker after it revoked the grant.
func (m *Manager) regrantEgress(ctx context.Context, rt workerruntime.Runtime, j store.Journey) {
	e, ok := m.cfg.Catalog.Lookup(j.WorkerID)
	if !ok || e.Definition.Isolation.Network != meshtype.NetworkEgress {
		return
	}
	if err := m.egressGrant(ctx, rt, handle(j), j.UID); err != nil {
		m.logger.WarnContext(ctx, "granting egress to a running worker failed", slog.String("journey", j.UID.String()), slog.Any("error", err))
	}
}
