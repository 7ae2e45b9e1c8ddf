package journeys

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// metrics are the marketplace's Prometheus metrics, registered on the
// registry the Config names (none: not registered, still counted).
//
// Every label value is bounded: worker ids are catalog ids (resolved before
// they are used), action types and decisions are enumerations, constraint
// ids are the gate's built-in ids and the catalog's rule ids, and agent
// backends are mapped onto a fixed list (telemetry.BoundBackend). Nothing a
// client or an agent sends becomes a label value as is.
type metrics struct {
	spawns   *prometheus.HistogramVec
	actions  *prometheus.HistogramVec
	refusals *prometheus.CounterVec
	// agent are the agent run metrics, mesh-exec's too (meshwork_agent_*),
	// with every known backend's series from the start.
	agent *telemetry.AgentMetrics
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		spawns: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshwork_spawn_duration_seconds", Help: "Time to spawn a worker, by worker and outcome (ok, pooled: from the warm pool, error).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}, []string{"worker", "outcome"}),
		actions: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshwork_action_duration_seconds", Help: "Time to run an action, gate included, by type and decision.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"type", "decision"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwork_gate_refusals_total", Help: "Constraint violations that refused an action, by constraint id.",
		}, []string{"constraint"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.spawns, m.actions, m.refusals} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("registering the metrics: %w", err)
			}
		}
	}
	agent, err := telemetry.NewAgentMetrics(reg, telemetry.AgentBackends())
	if err != nil {
		return nil, err
	}
	m.agent = agent
	return m, nil
}

// liveJourneys is meshwork_journeys_live: the journeys the store holds as
// live (starting or active), by worker, read at each scrape. The store, not
// the process, is the truth: it survives restarts and counts the journeys
// of every marketplace on the database (with several replicas, take the
// max, not the sum).
type liveJourneys struct {
	desc *prometheus.Desc
	// pool is meshwork_pool_members: the warm pools' members by worker and
	// state (creating, ready), read with the journeys.
	pool    *prometheus.Desc
	store   *store.Store
	catalog *workerdef.Catalog
	logger  *slog.Logger
}

// liveScrapeTimeout bounds the query of one scrape: a slow database must
// not hold /metrics or the OTLP export.
const liveScrapeTimeout = 2 * time.Second

func newLiveJourneys(st *store.Store, catalog *workerdef.Catalog, logger *slog.Logger) *liveJourneys {
	return &liveJourneys{
		desc: prometheus.NewDesc("meshwork_journeys_live",
			"Journeys currently live (starting or active), by worker.", []string{"worker"}, nil),
		pool: prometheus.NewDesc("meshwork_pool_members",
			"Warm pool members (workers started for no journey yet), by worker and state (creating, ready).", []string{"worker", "state"}, nil),
		store: st, catalog: catalog, logger: logger,
	}
}

func (l *liveJourneys) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc; ch <- l.pool }

// Collect reports every spawnable catalog worker, at zero when it has no
// live journey; journeys of workers no longer in the catalog count as
// "other". When the database cannot be read, nothing is reported (a gap,
// not a false zero) and the scrape's other metrics still go out.
func (l *liveJourneys) Collect(ch chan<- prometheus.Metric) {
	// Collect has no context; the query still needs a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), liveScrapeTimeout)
	defer cancel()
	counts, err := l.store.LiveCounts(ctx)
	if err != nil {
		l.logger.WarnContext(ctx, "counting live journeys for the metrics failed", slog.Any("error", err))
		return
	}
	out := map[string]int64{}
	for _, e := range l.catalog.Entries() {
		if !e.Definition.Abstract {
			out[e.Definition.ID] = 0
		}
	}
	for worker, n := range counts {
		if _, ok := out[worker]; !ok {
			worker = telemetry.BackendOther
		}
		out[worker] += n
	}
	for worker, n := range out {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, float64(n), worker)
	}
	members, err := l.store.PoolMembers(ctx)
	if err != nil {
		l.logger.WarnContext(ctx, "counting pool members for the metrics failed", slog.Any("error", err))
		return
	}
	pools := map[[2]string]int{}
	for _, m := range members {
		state := "creating"
		if m.Ready {
			state = "ready"
		}
		pools[[2]string{m.WorkerID, state}]++
	}
	for k, n := range pools {
		ch <- prometheus.MustNewConstMetric(l.pool, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
