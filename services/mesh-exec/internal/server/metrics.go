package server

import (
	"errors"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshwork/meshwork/pkg/telemetry"
)

// metrics count agent runs per backend: the agent run metrics every service
// shares (telemetry.AgentMetrics, meshwork_agent_*), and mesh-exec's own,
// the tool calls and the runs under way. The backend label only ever holds
// the name of a configured backend, and the other labels fixed words: no
// label value comes from agent output, which is untrusted and unbounded.
type metrics struct {
	agent    *telemetry.AgentMetrics
	toolUses *prometheus.CounterVec
	active   *prometheus.GaugeVec
}

// newMetrics makes the metrics and registers them with reg (nil: counted,
// not exposed). Every backend's series exist from the start at zero, so
// dashboards and rate() see a run from the first one on.
func newMetrics(reg prometheus.Registerer, backends []string) (*metrics, error) {
	backends = slices.Sorted(slices.Values(backends))
	agent, err := telemetry.NewAgentMetrics(reg, backends)
	if err != nil {
		return nil, err
	}
	m := &metrics{
		agent: agent,
		toolUses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwork_agent_tool_uses_total",
			Help: "Tool calls the agents made.",
		}, []string{"backend"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshwork_agent_runs_active",
			Help: "Agent runs in progress.",
		}, []string{"backend"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.toolUses, m.active} {
			if err := reg.Register(c); err != nil {
				return nil, errors.Join(errors.New("registering the agent run metrics"), err)
			}
		}
	}
	for _, b := range backends {
		m.toolUses.WithLabelValues(b)
		m.active.WithLabelValues(b)
	}
	return m, nil
}
