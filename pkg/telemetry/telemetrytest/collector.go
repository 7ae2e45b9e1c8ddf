package telemetrytest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector is a stand-in OTLP/HTTP collector for tests (http/protobuf,
// gzip or not, as the services export): set OTEL_EXPORTER_OTLP_ENDPOINT to
// its URL. It keeps what it is sent: the raw bodies by path (protobuf keeps
// strings as they are, so names can be looked for in them), the spans, and
// the metric exports.
type Collector struct {
	URL string

	mu      sync.Mutex
	raw     map[string][]byte
	spans   []Span
	metrics []*colmetricpb.ExportMetricsServiceRequest
}

// NewCollector starts a collector, closed when the test ends.
func NewCollector(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{raw: map[string][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

func (c *Collector) serve(w http.ResponseWriter, r *http.Request) {
	var (
		traces  coltracepb.ExportTraceServiceRequest
		metrics colmetricpb.ExportMetricsServiceRequest
		m       proto.Message
	)
	switch r.URL.Path {
	case "/v1/traces":
		m = &traces
	case "/v1/metrics":
		m = &metrics
	default:
		http.NotFound(w, r) // the services export no logs
		return
	}
	data, err := DecodeOTLP(r, m, 64<<20)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.raw[r.URL.Path] = append(c.raw[r.URL.Path], data...)
	c.spans = append(c.spans, SpansOf(&traces)...) // none in a metric export
	if r.URL.Path == "/v1/metrics" {
		c.metrics = append(c.metrics, &metrics)
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

// Raw is everything sent to path ("/v1/traces", "/v1/metrics"), joined.
func (c *Collector) Raw(path string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.raw[path])
}

// Spans are the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// LastGauge is the value of the gauge name in the last export that has it.
func (c *Collector) LastGauge(name string) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.metrics) - 1; i >= 0; i-- {
		for _, rm := range c.metrics[i].GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					if dps := m.GetGauge().GetDataPoints(); m.GetName() == name && len(dps) > 0 {
						return dps[0].GetAsDouble(), true
					}
				}
			}
		}
	}
	return 0, false
}
