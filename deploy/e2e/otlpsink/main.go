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
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"slices"
	"sync"
	"time"

	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// maxSpans bounds memory: an e2e run makes a few thousand at most.
const (
	maxSpans = 200_000
	maxBody  = 32 << 20
)

type sink struct {
	mu      sync.Mutex
	spans   []telemetrytest.Span
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
	if _, err := telemetrytest.DecodeOTLP(r, &req, maxBody); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	got := telemetrytest.SpansOf(&req)
	s.mu.Lock()
	if len(s.spans)+len(got) <= maxSpans {
		s.spans = append(s.spans, got...)
	}
	s.mu.Unlock()
	reply(w, r, &coltrace.ExportTraceServiceResponse{})
}

func (s *sink) metricsIn(w http.ResponseWriter, r *http.Request) {
	var req colmetric.ExportMetricsServiceRequest
	if _, err := telemetrytest.DecodeOTLP(r, &req, maxBody); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	for _, rm := range req.GetResourceMetrics() {
		service := telemetrytest.ResourceService(rm.GetResource().GetAttributes())
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
	out := make([]telemetrytest.Span, 0, len(s.spans))
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
