package telemetry_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
)

// Setup exports spans and the Prometheus registry's metrics over OTLP/HTTP
// to the endpoint the standard variable names, under OTEL_SERVICE_NAME, and
// flushes them, without an error, when stopped.
func TestSetupExportsOverOTLPHTTP(t *testing.T) {
	collector := telemetrytest.NewCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "svc-under-test")
	reg := telemetry.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "meshwork_test_things_total", Help: "things"})
	reg.MustRegister(c)
	c.Add(3)

	var logs telemetrytest.SyncBuffer
	stop, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "default-name", Metrics: reg, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, span := telemetry.Tracer().Start(context.Background(), "kept-root")
	_, child := telemetry.Tracer().Start(ctx, "kept-db-child")
	child.SetAttributes(attribute.String("db.system", "postgresql"))
	child.End()
	span.End()

	stop()
	stop() // once only
	if logs.String() != "" {
		t.Errorf("stopping logged: %s", logs.String())
	}
	traces := collector.Raw("/v1/traces")
	metrics := collector.Raw("/v1/metrics")
	for _, want := range []string{"kept-root", "kept-db-child", "svc-under-test"} {
		if !strings.Contains(traces, want) {
			t.Errorf("exported traces lack %q", want)
		}
	}
	if strings.Contains(traces, "default-name") {
		t.Errorf("exported traces hold the default service name, not OTEL_SERVICE_NAME's")
	}
	for _, want := range []string{"meshwork_test_things_total", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("exported metrics lack the Prometheus registry's %s (%d bytes)", want, len(metrics))
		}
	}
}

func TestSetupRefusesGRPC(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	_, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "x"})
	if err == nil || !strings.Contains(err.Error(), "http/protobuf") {
		t.Fatalf("err = %v, want a refusal naming http/protobuf", err)
	}
}

// OTEL_SDK_DISABLED takes true or false: anything else is refused, not read
// as false (telemetry on) without a word.
func TestSetupRefusesAMalformedDisabled(t *testing.T) {
	for _, v := range []string{"yes", "1", "off"} {
		t.Setenv("OTEL_SDK_DISABLED", v)
		_, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "x"})
		if err == nil || !strings.Contains(err.Error(), "OTEL_SDK_DISABLED") || !strings.Contains(err.Error(), "not a boolean") {
			t.Errorf("OTEL_SDK_DISABLED=%s: %v, want a refusal naming the setting", v, err)
		}
	}
	for _, v := range []string{"TRUE", "true"} {
		t.Setenv("OTEL_SDK_DISABLED", v)
		if stop, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "x"}); err != nil {
			t.Errorf("OTEL_SDK_DISABLED=%s: %v", v, err)
		} else {
			stop()
		}
	}
}

// Attribute values are bounded by default, and a failed span's message too:
// both may carry a client's or an agent's text.
func TestSpansAreBounded(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	stop, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
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
