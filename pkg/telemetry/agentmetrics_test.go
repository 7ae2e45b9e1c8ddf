package telemetry_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// A backend name from an agent is a label value only when it is a known
// backend; anything else is "other".
func TestBoundBackend(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"claude": "claude", "codex": "codex", "opencode": "opencode", "gemini": "gemini", "command": "command",
		"": "other", "other": "other", "Claude": "other", "claude\n": "other", strings.Repeat("x", 10000): "other",
	} {
		if got := telemetry.BoundBackend(in); got != want {
			t.Errorf("BoundBackend(%.20q) = %q, want %q", in, got, want)
		}
	}
}

// Usage an agent reports is untrusted: a negative, NaN, infinite or absurd
// amount neither panics (a negative Add would) nor counts, and a backend
// the metrics were not made for counts as "other", so no label value comes
// from the run.
func TestAgentMetricsObserve(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := telemetry.NewAgentMetrics(reg, []string{"claude", telemetry.BackendOther})
	if err != nil {
		t.Fatal(err)
	}
	m.Observe(telemetry.AgentRun{Backend: "claude", OK: true, CostUSD: 0.25, InputTokens: 120, OutputTokens: 30, Turns: 3, Duration: 2 * time.Second})
	for _, bad := range []telemetry.AgentRun{
		{Backend: "claude", CostUSD: -5, InputTokens: -1, OutputTokens: -1, Turns: -1, Duration: -time.Second},
		{Backend: "claude", CostUSD: math.NaN()},
		{Backend: "claude", CostUSD: math.Inf(1)},
		{Backend: "claude", CostUSD: math.Inf(-1)},
		{Backend: "claude", CostUSD: 1e300, InputTokens: math.MaxInt64, OutputTokens: 1e13, Turns: 1e7},
	} {
		m.Observe(bad) // each an error run, with no usage counted
	}
	m.Observe(telemetry.AgentRun{Backend: "made-up\n", OK: true, CostUSD: 1, Duration: time.Second})

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"meshwork_agent_runs_total", map[string]string{"backend": "claude", "outcome": "ok"}, 1},
		{"meshwork_agent_runs_total", map[string]string{"backend": "claude", "outcome": "error"}, 5},
		{"meshwork_agent_runs_total", map[string]string{"backend": "other", "outcome": "ok"}, 1},
		{"meshwork_agent_cost_usd_total", map[string]string{"backend": "claude"}, 0.25},
		{"meshwork_agent_cost_usd_total", map[string]string{"backend": "other"}, 1},
		{"meshwork_agent_tokens_total", map[string]string{"backend": "claude", "type": "input"}, 120},
		{"meshwork_agent_tokens_total", map[string]string{"backend": "claude", "type": "output"}, 30},
		{"meshwork_agent_turns_total", map[string]string{"backend": "claude"}, 3},
		{"meshwork_agent_run_duration_seconds", map[string]string{"backend": "claude"}, 5}, // the negative duration left out
	} {
		if got := telemetrytest.MetricValue(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	// Two backends, each with its fixed series, and nothing else.
	if n := seriesOf(reg, "meshwork_agent_runs_total"); n != 4 {
		t.Errorf("meshwork_agent_runs_total has %d series, want 4", n)
	}
	if n := seriesOf(reg, "meshwork_agent_tokens_total"); n != 4 {
		t.Errorf("meshwork_agent_tokens_total has %d series, want 4", n)
	}
	// A second set on the same registry is an error, not a panic.
	if _, err := telemetry.NewAgentMetrics(reg, nil); err == nil {
		t.Error("registering the agent metrics twice did not fail")
	}
}

// seriesOf counts the series of the metric name in reg.
func seriesOf(reg prometheus.Gatherer, name string) int {
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func TestUsageOK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v, limit float64
		want     bool
	}{
		{0, 1, true},
		{1, 1, true},
		{0.5, 1, true},
		{-0.1, 1, false},
		{1.1, 1, false},
		{math.NaN(), 1, false},
		{math.Inf(1), 1, false},
		{math.Inf(-1), 1, false},
	} {
		if got := telemetry.UsageOK(tc.v, tc.limit); got != tc.want {
			t.Errorf("UsageOK(%v, %v) = %v, want %v", tc.v, tc.limit, got, tc.want)
		}
	}
}

func ExampleAgentMetrics() {
	reg := prometheus.NewRegistry()
	m, err := telemetry.NewAgentMetrics(reg, telemetry.AgentBackends())
	if err != nil {
		panic(err)
	}
	// The backend an agent reported, untrusted, bounded first.
	m.Observe(telemetry.AgentRun{Backend: telemetry.BoundBackend("claude"), OK: true, CostUSD: 0.5, Turns: 2, Duration: time.Minute})
	m.Observe(telemetry.AgentRun{Backend: telemetry.BoundBackend("mystery"), CostUSD: -1}) // an error; the cost is left out
	mfs, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "meshwork_agent_runs_total" {
			continue
		}
		for _, s := range mf.GetMetric() { // backend, outcome
			if v := s.GetCounter().GetValue(); v > 0 {
				fmt.Println(s.GetLabel()[0].GetValue(), s.GetLabel()[1].GetValue(), v)
			}
		}
	}
	// Output:
	// claude ok 1
	// other error 1
}
