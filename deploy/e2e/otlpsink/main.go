// Command otlpsink is a TEST DOUBLE of an OpenTelemetry collector, for the
// end-to-end test of the compose stack (deploy/e2e): it takes the place of
// the lgtm service, receives OTLP over HTTP (protobuf or JSON, gzip or not)
// on :4318, keeps what it received in memory, and answers the test's
// questions about it:
//
//	GET /spans?trace_id=HEX   the spans received (all, or of one trace), as JSON
//	GET /metrics-names        the metrics received: name -> the services that sent it
//	GET /healthz              200
//
// It is built into the test-only image meshwork/otlp-sink:test by
// `make e2e` and is never part of the stack users run.
package main

import (
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxSpans bounds memory: an e2e run makes a few thousand at most.
const (
	maxSpans = 200_000
	maxBody  = 32 << 20
)

// Span is one received span, flattened for the test.
type Span struct {
	TraceID    string            `json:"trace_id"`
	SpanID     string            `json:"span_id"`
	ParentID   string            `json:"parent_span_id,omitempty"`
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	Service    string            `json:"service"`
	Attributes map[string]string `json:"attributes"`
	Events     []Event           `json:"events,omitempty"`
	Status     string            `json:"status,omitempty"`
	Start      time.Time         `json:"start"`
	End        time.Time         `json:"end"`
}

// Event is a span event.
type Event struct {
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes"`
}

type sink struct {
	mu      sync.Mutex
	spans   []Span
	metrics map[string]map[string]bool // name -> service.name -> seen
}

func main() {
	addr := flag.String("addr", ":4318", "listen address")
	flag.Parse()
	s := &sink{metrics: map[string]map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", s.traces)
	mux.HandleFunc("POST /v1/metrics", s.metricsIn)
	mux.HandleFunc("POST /v1/logs", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /spans", s.listSpans)
	mux.HandleFunc("GET /metrics-names", s.listMetrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("otlpsink listening on %s", *addr)
	log.Fatal(srv.ListenAndServe())
}

// decode reads an OTLP request body into m, as the exporter encoded it.
func decode(r *http.Request, m proto.Message) error {
	var body io.Reader = http.MaxBytesReader(nil, r.Body, maxBody)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return err
		}
		defer func() { _ = zr.Close() }()
		body = io.LimitReader(zr, maxBody)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if r.Header.Get("Content-Type") == "application/json" {
		return protojson.Unmarshal(b, m)
	}
	return proto.Unmarshal(b, m)
}

// reply answers with an empty export response in the request's encoding.
func reply(w http.ResponseWriter, r *http.Request, m proto.Message) {
	if r.Header.Get("Content-Type") == "application/json" {
		b, _ := protojson.Marshal(m)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	}
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func (s *sink) traces(w http.ResponseWriter, r *http.Request) {
	var req coltrace.ExportTraceServiceRequest
	if err := decode(r, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				out := Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					Name: sp.GetName(), Kind: sp.GetKind().String(), Service: service,
					Attributes: attrs(sp.GetAttributes()), Status: sp.GetStatus().GetCode().String(),
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC(),
				}
				if p := sp.GetParentSpanId(); len(p) > 0 {
					out.ParentID = hex.EncodeToString(p)
				}
				for _, e := range sp.GetEvents() {
					out.Events = append(out.Events, Event{Name: e.GetName(), Attributes: attrs(e.GetAttributes())})
				}
				got = append(got, out)
			}
		}
	}
	s.mu.Lock()
	if len(s.spans)+len(got) <= maxSpans {
		s.spans = append(s.spans, got...)
	}
	s.mu.Unlock()
	reply(w, r, &coltrace.ExportTraceServiceResponse{})
}

func (s *sink) metricsIn(w http.ResponseWriter, r *http.Request) {
	var req colmetric.ExportMetricsServiceRequest
	if err := decode(r, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	for _, rm := range req.GetResourceMetrics() {
		service := attrs(rm.GetResource().GetAttributes())["service.name"]
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				if s.metrics[m.GetName()] == nil {
					if len(s.metrics) >= 10_000 {
						continue
					}
					s.metrics[m.GetName()] = map[string]bool{}
				}
				s.metrics[m.GetName()][service] = true
			}
		}
	}
	s.mu.Unlock()
	reply(w, r, &colmetric.ExportMetricsServiceResponse{})
}

func (s *sink) listSpans(w http.ResponseWriter, r *http.Request) {
	want := r.URL.Query().Get("trace_id")
	s.mu.Lock()
	out := make([]Span, 0, len(s.spans))
	for _, sp := range s.spans {
		if want == "" || sp.TraceID == want {
			out = append(out, sp)
		}
	}
	s.mu.Unlock()
	writeJSON(w, out)
}

func (s *sink) listMetrics(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := make(map[string][]string, len(s.metrics))
	for name, services := range s.metrics {
		for svc := range services {
			out[name] = append(out[name], svc)
		}
		slices.Sort(out[name])
	}
	s.mu.Unlock()
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil && !errors.Is(err, http.ErrHandlerTimeout) {
		log.Printf("writing an answer: %v", err)
	}
}

// attrs flattens OTLP attributes to strings (arrays as JSON), enough for
// the test's assertions.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		var items []string
		for _, e := range x.ArrayValue.GetValues() {
			items = append(items, value(e))
		}
		b, _ := json.Marshal(items)
		return string(b)
	default:
		b, _ := protojson.Marshal(v)
		return string(b)
	}
}
