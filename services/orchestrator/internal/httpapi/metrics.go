package httpapi

import (
	"context"
	"strconv"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/store"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the API's Prometheus metrics.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	started  *prometheus.CounterVec
}

// NewMetrics registers the API's metrics on reg:
//
//   - orchestrator_http_requests_total{method, route, code}
//   - orchestrator_http_request_duration_seconds{method, route}
//   - orchestrator_runs_started_total{pipeline, surface}: runs and forks
//     started by this replica, over http or mcp
//
// route is chi's route pattern, such as /v1/runs/{id}, or "unmatched";
// method is the request's if standard (GET, HEAD, POST, PUT, PATCH, DELETE,
// OPTIONS), else OTHER.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_http_requests_total", Help: "HTTP requests served, by route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "orchestrator_http_request_duration_seconds", Help: "Time to serve an HTTP request (an event stream lasts as long as its run).",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orchestrator_runs_started_total", Help: "Runs (and forks) started through this replica, by pipeline and surface (http, mcp).",
		}, []string{"pipeline", "surface"}),
	}
	reg.MustRegister(m.requests, m.duration, m.started)
	return m
}

// RunStarted counts a run started through surface (http or mcp).
func (m *Metrics) RunStarted(pipeline, surface string) {
	m.started.WithLabelValues(pipeline, surface).Inc()
}

func (m *Metrics) observeRequest(method, route string, status int, d time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(method, route).Observe(d.Seconds())
}

// RunsCollector reports orchestrator_runs{pipeline, status}, the runs in
// the database by status, counted at each scrape. It sees every replica's
// runs, so it counts finished runs however many replicas there are; sum it
// across status for every run ever started.
type RunsCollector struct {
	db   store.Querier
	desc *prometheus.Desc
	up   *prometheus.Desc
}

// NewRunsCollector returns a RunsCollector over db.
func NewRunsCollector(db store.Querier) *RunsCollector {
	return &RunsCollector{
		db:   db,
		desc: prometheus.NewDesc("orchestrator_runs", "Runs in the database, by pipeline and status (running, waiting, succeeded, failed, cancelled).", []string{"pipeline", "status"}, nil),
		up:   prometheus.NewDesc("orchestrator_runs_scrape_ok", "1 if orchestrator_runs could be counted at this scrape, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *RunsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *RunsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok := 1.0
	counts, err := store.CountRuns(ctx, c.db)
	for _, rc := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(rc.Runs), rc.Pipeline, rc.Status)
	}
	if err != nil {
		ok = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, ok)
}
