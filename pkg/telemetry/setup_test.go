package telemetry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// Setup exports spans and the Prometheus registry's metrics over OTLP/HTTP
// to the endpoint the standard variable names; root database spans are
// dropped, database spans inside a trace are kept.
func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	collector := telemetrytest.NewCollector(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SERVICE_NAME": "svc-under-test"}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL) // the exporters read the process environment
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "meshwork_test_things_total", Help: "things"})
	reg.MustRegister(c)
	c.Add(3)

	shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "default-name", Metrics: reg, Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := telemetry.Tracer().Start(context.Background(), "kept-root")
	_, child := telemetry.Tracer().Start(ctx, "kept-db-child")
	child.SetAttributes(attribute.String("db.system", "postgresql"))
	child.End()
	span.End()
	// A root span that is a query is dropped (attributes at start decide).
	_, dropped := telemetry.Tracer().Start(context.Background(), "dropped-db-root", traceAttr("db.system", "postgresql"))
	dropped.End()

	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	traces := collector.Raw("/v1/traces")
	metrics := collector.Raw("/v1/metrics")
	for _, want := range []string{"kept-root", "kept-db-child", "svc-under-test"} {
		if !strings.Contains(traces, want) {
			t.Errorf("exported traces lack %q", want)
		}
	}
	if strings.Contains(traces, "dropped-db-root") || strings.Contains(traces, "default-name") {
		t.Errorf("exported traces hold a root database span or the default service name")
	}
	if !strings.Contains(metrics, "meshwork_test_things_total") {
		t.Errorf("exported metrics lack the Prometheus registry's counter (%d bytes)", len(metrics))
	}
}

func TestSetupRefusesGRPC(t *testing.T) {
	_, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "x", Getenv: func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}[k]
	}})
	if err == nil || !strings.Contains(err.Error(), "http/protobuf") {
		t.Fatalf("err = %v, want a refusal naming http/protobuf", err)
	}
}

func traceAttr(k, v string) trace.SpanStartOption {
	return trace.WithAttributes(attribute.String(k, v))
}

// Attribute values are bounded by default, and a failed span's message too:
// both may carry a client's or an agent's text.
func TestSpansAreBounded(t *testing.T) {
	shutdown, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "x", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer telemetry.Flush(shutdown, time.Second, nil)
	rec := tracetest.NewSpanRecorder()
	otel.GetTracerProvider().(*sdktrace.TracerProvider).RegisterSpanProcessor(rec)
	_, span := telemetry.Tracer().Start(context.Background(), "op")
	huge := strings.Repeat("x", 1<<20)
	span.SetAttributes(attribute.String("user_agent.original", huge))
	telemetry.Fail(span, errors.New(huge), "agent_error")
	span.End()
	got := rec.Ended()[0]
	for _, a := range got.Attributes() {
		if len(a.Value.AsString()) > 1024 {
			t.Errorf("attribute %s is %d bytes", a.Key, len(a.Value.AsString()))
		}
	}
	if n := len(got.Status().Description); n > 512 {
		t.Errorf("status description is %d bytes", n)
	}
	for _, e := range got.Events() {
		for _, a := range e.Attributes {
			if len(a.Value.AsString()) > 1024 {
				t.Errorf("event %s attribute %s is %d bytes", e.Name, a.Key, len(a.Value.AsString()))
			}
		}
	}
}
