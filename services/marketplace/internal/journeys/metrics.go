package journeys

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the marketplace's Prometheus metrics, registered on the
// registry the Config names (none: not registered, still counted).
type metrics struct {
	spawns   *prometheus.HistogramVec
	actions  *prometheus.HistogramVec
	refusals *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		spawns: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshwork_spawn_duration_seconds", Help: "Time to spawn a worker, by worker and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
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
		reg.MustRegister(m.spawns, m.actions, m.refusals)
	}
	return m
}
