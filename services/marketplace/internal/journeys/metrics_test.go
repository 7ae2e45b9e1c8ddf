package journeys

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// Usage reported by an agent is untrusted: a negative, non-finite, absurd
// or mistyped amount is left out, never added to a counter (a negative Add
// panics; a NaN poisons the series for good), and the backend label holds
// only known backends.
func TestAgentRunUsageFromUntrustedMetadata(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}

	good := parseUsage(map[string]any{"backend": "claude", "cost_usd": 0.25, "num_turns": 3.0, "input_tokens": 120.0, "output_tokens": 30.0})
	good.Duration = 2 * time.Second
	m.agent.Observe(good)
	hostile := parseUsage(map[string]any{
		"backend": "claude", "cost_usd": -5.0, "num_turns": math.NaN(), "input_tokens": math.Inf(1), "output_tokens": "many",
	})
	if hostile.CostUSD != 0 || hostile.Turns != 0 || hostile.InputTokens != 0 || hostile.OutputTokens != 0 {
		t.Errorf("hostile usage read as present: %+v", hostile)
	}
	hostile.OK, hostile.Duration = false, time.Second
	m.agent.Observe(hostile)
	huge := parseUsage(map[string]any{"cost_usd": 1e300, "num_turns": 1e7, "input_tokens": 1e13})
	if huge.CostUSD != 0 || huge.Turns != 0 || huge.InputTokens != 0 {
		t.Errorf("absurd usage read as present: %+v", huge)
	}
	huge.Backend, huge.Duration = telemetry.BoundBackend("made-up"), time.Second
	m.agent.Observe(huge)

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"meshwork_agent_runs_total", map[string]string{"backend": "claude", "outcome": "ok"}, 1},
		{"meshwork_agent_runs_total", map[string]string{"backend": "claude", "outcome": "error"}, 1},
		{"meshwork_agent_runs_total", map[string]string{"backend": "other", "outcome": "ok"}, 1},
		{"meshwork_agent_cost_usd_total", map[string]string{"backend": "claude"}, 0.25},
		{"meshwork_agent_cost_usd_total", map[string]string{"backend": "other"}, 0},
		{"meshwork_agent_turns_total", map[string]string{"backend": "claude"}, 3},
		{"meshwork_agent_turns_total", map[string]string{"backend": "other"}, 0},
		{"meshwork_agent_tokens_total", map[string]string{"backend": "claude", "type": "input"}, 120},
		{"meshwork_agent_tokens_total", map[string]string{"backend": "claude", "type": "output"}, 30},
		{"meshwork_agent_tokens_total", map[string]string{"backend": "other", "type": "input"}, 0},
	} {
		if got := telemetrytest.MetricValue(t, reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	// Six backends (five known and other), each with its fixed series, and
	// nothing else: no label value came from the metadata.
	if n := testutil.CollectAndCount(reg, "meshwork_agent_runs_total"); n != 12 {
		t.Errorf("meshwork_agent_runs_total has %d series, want 12", n)
	}
	if n := testutil.CollectAndCount(reg, "meshwork_agent_tokens_total"); n != 12 {
		t.Errorf("meshwork_agent_tokens_total has %d series, want 12", n)
	}
}
