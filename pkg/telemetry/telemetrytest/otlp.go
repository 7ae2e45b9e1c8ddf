package telemetrytest

import (
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is an exported span as tests look at it, flattened from OTLP: the
// Collector's spans, and the JSON that the e2e test's OTLP receiver
// (deploy/e2e/otlpsink) serves.
type Span struct {
	TraceID  string `json:"trace_id"`
	SpanID   string `json:"span_id"`
	ParentID string `json:"parent_span_id,omitempty"` // empty for a root
	Name     string `json:"name"`
	Kind     string `json:"kind"` // "SPAN_KIND_SERVER", …
	// Service is the resource's service.name.
	Service string `json:"service"`
	// Attributes holds every attribute's value as a string (arrays as
	// JSON arrays of strings).
	Attributes map[string]string `json:"attributes"`
	Events     []Event           `json:"events,omitempty"`
	Status     string            `json:"status,omitempty"` // "STATUS_CODE_ERROR", …
	Start      time.Time         `json:"start"`
	End        time.Time         `json:"end"`
}

// Event is a span event.
type Event struct {
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes"`
}

// SpansOf flattens an OTLP trace export.
func SpansOf(req *coltracepb.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range req.GetResourceSpans() {
		service := flatten(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentID: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(), Kind: sp.GetKind().String(),
					Service: service, Attributes: flatten(sp.GetAttributes()), Status: sp.GetStatus().GetCode().String(),
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())).UTC(), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())).UTC(),
				}
				for _, e := range sp.GetEvents() {
					s.Events = append(s.Events, Event{Name: e.GetName(), Attributes: flatten(e.GetAttributes())})
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// DecodeOTLP reads an OTLP/HTTP request into m as the exporter encoded it
// (protobuf or JSON, gzip or not), at most limit bytes of body before and
// after decompression, and returns the decompressed body.
func DecodeOTLP(r *http.Request, m proto.Message, limit int64) ([]byte, error) {
	var body io.Reader = http.MaxBytesReader(nil, r.Body, limit)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, err
		}
		defer func() { _ = zr.Close() }()
		body = io.LimitReader(zr, limit)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	if r.Header.Get("Content-Type") == "application/json" {
		return b, protojson.Unmarshal(b, m)
	}
	return b, proto.Unmarshal(b, m)
}

// ResourceService is the service.name of an OTLP resource's attributes.
func ResourceService(kvs []*commonpb.KeyValue) string {
	return flatten(kvs)["service.name"]
}

func flatten(kvs []*commonpb.KeyValue) map[string]string {
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
		items := []string{}
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
