package telemetry

import (
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BackendOther is the backend label of an agent backend that is not one of
// the known ones (BoundBackend) or not one an AgentMetrics was made for.
const BackendOther = "other"

// knownBackends are the agent backends Meshwork runs.
var knownBackends = []string{"claude", "codex", "opencode", "gemini", "command"}

// AgentBackends returns the values BoundBackend maps names onto: the known
// agent backends and BackendOther.
func AgentBackends() []string { return append(slices.Clone(knownBackends), BackendOther) }

// BoundBackend maps a backend name from an untrusted source (an agent's
// metadata, say) onto AgentBackends, so that it can be a label value: a
// known backend stays as it is, any other name is BackendOther.
func BoundBackend(name string) string {
	if slices.Contains(knownBackends, name) {
		return name
	}
	return BackendOther
}

// Bounds of the usage an agent run may report, far above any real run: a
// larger amount is garbage (agent output is untrusted) and is not counted.
const (
	MaxAgentCostUSD = 1e6
	MaxAgentTokens  = 1e12
	MaxAgentTurns   = 1e6
)

// UsageOK reports whether v, an amount an agent run reported, is one to
// count: not negative, not NaN and at most limit (so finite). A counter
// must not go down (a negative Add panics) nor be poisoned for good by a
// NaN or an absurd amount.
func UsageOK(v, limit float64) bool { return v >= 0 && v <= limit }

// Outcomes of an agent run, the outcome label of meshwork_agent_runs_total.
const (
	agentOutcomeOK    = "ok"
	agentOutcomeError = "error"
)

// AgentMetrics are the agent run metrics, the same in every service that
// runs or calls agents (mesh-exec, the marketplace), so that dashboards read
// them alike:
//
//	meshwork_agent_runs_total{backend,outcome}   outcome: ok, error
//	meshwork_agent_cost_usd_total{backend}
//	meshwork_agent_tokens_total{backend,type}    type: input, output
//	meshwork_agent_turns_total{backend}
//	meshwork_agent_run_duration_seconds{backend}
//
// Every label value is bounded: the backend is one AgentMetrics was made
// for, or BackendOther.
type AgentMetrics struct {
	backends []string
	runs     *prometheus.CounterVec
	cost     *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	turns    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewAgentMetrics makes the agent run metrics for backends and registers
// them with reg (nil: counted, not exposed). Every series of backends exists
// from the start at zero, so that rate() sees the first run.
func NewAgentMetrics(reg prometheus.Registerer, backends []string) (*AgentMetrics, error) {
	m := &AgentMetrics{
		backends: slices.Clone(backends),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwork_agent_runs_total",
			Help: "Agent runs by backend and outcome (ok, or error: the agent failed, timed out or could not be reached).",
		}, []string{"backend", "outcome"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwork_agent_cost_usd_total", Help: "Cost the agents reported, in US dollars.",
		}, []string{"backend"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwork_agent_tokens_total", Help: "Tokens the agents reported, by type (input, output).",
		}, []string{"backend", "type"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshwork_agent_turns_total", Help: "Turns the agents reported.",
		}, []string{"backend"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "meshwork_agent_run_duration_seconds",
			Help: "Wall time of agent runs, as the reporting service saw them (mesh-exec: the agent's process; the marketplace: its call to mesh-exec).",
			// Agent runs take seconds to an hour (the longest timeout).
			Buckets: []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}, []string{"backend"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.runs, m.cost, m.tokens, m.turns, m.duration} {
			if err := reg.Register(c); err != nil {
				return nil, errors.Join(errors.New("registering the agent run metrics"), err)
			}
		}
	}
	for _, b := range m.backends {
		m.runs.WithLabelValues(b, agentOutcomeOK)
		m.runs.WithLabelValues(b, agentOutcomeError)
		m.cost.WithLabelValues(b)
		m.tokens.WithLabelValues(b, "input")
		m.tokens.WithLabelValues(b, "output")
		m.turns.WithLabelValues(b)
		m.duration.WithLabelValues(b)
	}
	return m, nil
}

// AgentRun is one finished agent run. The usage is what the agent reported,
// untrusted: Observe leaves out an amount UsageOK refuses.
type AgentRun struct {
	// Backend is the backend label: one the metrics were made for, else
	// counted as BackendOther.
	Backend string
	// OK says the run succeeded; else its outcome is "error".
	OK bool
	// CostUSD, InputTokens, OutputTokens and Turns are the reported usage;
	// zero when not reported.
	CostUSD                   float64
	InputTokens, OutputTokens int64
	Turns                     int64
	// Duration is the run's wall time.
	Duration time.Duration
}

// Observe counts a finished run.
func (m *AgentMetrics) Observe(r AgentRun) {
	backend := r.Backend
	if !slices.Contains(m.backends, backend) {
		backend = BackendOther
	}
	outcome := agentOutcomeOK
	if !r.OK {
		outcome = agentOutcomeError
	}
	m.runs.WithLabelValues(backend, outcome).Inc()
	if r.Duration >= 0 {
		m.duration.WithLabelValues(backend).Observe(r.Duration.Seconds())
	}
	if r.CostUSD > 0 && UsageOK(r.CostUSD, MaxAgentCostUSD) {
		m.cost.WithLabelValues(backend).Add(r.CostUSD)
	}
	if in := float64(r.InputTokens); in > 0 && UsageOK(in, MaxAgentTokens) {
		m.tokens.WithLabelValues(backend, "input").Add(in)
	}
	if out := float64(r.OutputTokens); out > 0 && UsageOK(out, MaxAgentTokens) {
		m.tokens.WithLabelValues(backend, "output").Add(out)
	}
	if turns := float64(r.Turns); turns > 0 && UsageOK(turns, MaxAgentTurns) {
		m.turns.WithLabelValues(backend).Add(turns)
	}
}
