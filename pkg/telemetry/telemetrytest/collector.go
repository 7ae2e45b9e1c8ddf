package telemetrytest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
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

// Span is what tests look at of an exported span.
type Span struct {
	TraceID, SpanID, ParentID, Name string
	Kind                            tracepb.Span_SpanKind
	// Service is the resource's service.name.
	Service string
	// Attrs holds string and integer attributes as strings.
	Attrs map[string]string
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
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.raw[r.URL.Path] = append(c.raw[r.URL.Path], data...)
	switch r.URL.Path {
	case "/v1/traces":
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.addSpans(req)
	case "/v1/metrics":
		req := &colmetricpb.ExportMetricsServiceRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.metrics = append(c.metrics, req)
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (c *Collector) addSpans(req *coltracepb.ExportTraceServiceRequest) {
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				c.spans = append(c.spans, Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentID: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(), Kind: sp.GetKind(),
					Service: service, Attrs: attrs(sp.GetAttributes()),
				})
			}
		}
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		}
	}
	return out
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
