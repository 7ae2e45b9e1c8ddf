package grafana

// MetricKind is how a metric is queried: counters through rate or increase,
// histograms through their _bucket, _sum and _count series.
type MetricKind int

// The kinds of metric.
const (
	Gauge MetricKind = iota
	Counter
	Histogram
)

// Metric is one metric of the services' contract.
type Metric struct {
	Kind   MetricKind
	Labels []string
	// Services emit it (their OTEL_SERVICE_NAME); the e2e test checks that
	// each of them sends it over OTLP.
	Services []string
}

// Metrics is the services' metrics contract: every metric a
// dashboard may name, with its labels. The services keep them on a
// Prometheus registry (/metrics) bridged to OTLP, and through the collector
// of grafana/otel-lgtm they reach Prometheus under these same names, with
// job = service.name. A dashboard naming anything else shows nothing; a
// service renaming one of these breaks a dashboard: change both together.
var Metrics = map[string]Metric{
	// orchestrator
	"orchestrator_runs":                          {Gauge, []string{"pipeline", "status"}, orchestrator},
	"orchestrator_runs_scrape_ok":                {Gauge, nil, orchestrator},
	"orchestrator_runs_started_total":            {Counter, []string{"pipeline", "surface"}, orchestrator},
	"orchestrator_http_requests_total":           {Counter, []string{"method", "route", "code"}, orchestrator},
	"orchestrator_http_request_duration_seconds": {Histogram, []string{"method", "route"}, orchestrator},
	"meshwork_node_duration_seconds":             {Histogram, []string{"pipeline", "node", "outcome"}, orchestrator},
	"meshwork_node_retries_total":                {Counter, []string{"pipeline", "node"}, orchestrator},
	// marketplace
	"meshwork_spawn_duration_seconds":  {Histogram, []string{"worker", "outcome"}, marketplace},
	"meshwork_action_duration_seconds": {Histogram, []string{"type", "decision"}, marketplace},
	"meshwork_gate_refusals_total":     {Counter, []string{"constraint"}, marketplace},
	"meshwork_journeys_live":           {Gauge, []string{"worker"}, marketplace},
	// agents: mesh-exec (roles via mesh) and the marketplace (agent workers)
	"meshwork_agent_runs_total":           {Counter, []string{"backend", "outcome"}, agents},
	"meshwork_agent_cost_usd_total":       {Counter, []string{"backend"}, agents},
	"meshwork_agent_tokens_total":         {Counter, []string{"backend", "type"}, agents},
	"meshwork_agent_turns_total":          {Counter, []string{"backend"}, agents},
	"meshwork_agent_run_duration_seconds": {Histogram, []string{"backend"}, agents},
	"meshwork_agent_tool_uses_total":      {Counter, []string{"backend"}, meshExec},
	"meshwork_agent_runs_active":          {Gauge, []string{"backend"}, meshExec},
}

var (
	orchestrator = []string{"meshwork-orchestrator"}
	marketplace  = []string{"meshwork-marketplace"}
	meshExec     = []string{"meshwork-mesh-exec"}
	agents       = []string{"meshwork-mesh-exec", "meshwork-marketplace"}
)
