package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	otelprom "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Config says who is reporting.
type Config struct {
	// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME
	// says otherwise, e.g. "meshwork-marketplace".
	ServiceName string
	// Version is service.version.
	Version string
	// Metrics, when set, is exported over OTLP too (through the Prometheus
	// bridge), so a service keeps one registry for /metrics and for OTLP.
	Metrics prometheus.Gatherer
	// Logger receives the SDK's own errors (an unreachable collector, say),
	// at most one line per errorLogInterval; default: discarded.
	Logger *slog.Logger
}

// errorLogInterval spaces the SDK's error lines: an unreachable collector
// fails every export, and one line a minute says so well enough.
const errorLogInterval = time.Minute

// defaultAttributeValueLength bounds every span attribute's value when
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT does not say otherwise. Attributes come
// from requests (headers such as the user agent) and agent output: without a
// bound a client could make spans of megabytes.
const defaultAttributeValueLength = 1024

// flushTimeout bounds the last export on the way out: a collector that is
// gone must not hold up a shutdown.
const flushTimeout = 5 * time.Second

// exporting reports whether the environment asks for OTLP export: an
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or a per-signal one).
func exporting() (traces, metrics bool) {
	all := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	traces = (all || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") && os.Getenv("OTEL_TRACES_EXPORTER") != "none"
	metrics = (all || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "") && os.Getenv("OTEL_METRICS_EXPORTER") != "none"
	return traces, metrics
}

// NewRegistry returns a Prometheus registry with the Go runtime's and the
// process's collectors: a service's one registry, served at /metrics and
// exported over OTLP (Config.Metrics).
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Setup installs the global tracer provider, meter provider and
// propagator, and returns the function that flushes and stops them, for
// the way out: it takes at most 5 seconds, logs what went wrong to
// cfg.Logger, and does its work the first time it is called only.
//
// The OTEL_* variables are read from the process environment, as the SDK's
// exporters read them.
//
// Spans are always recorded, so that trace ids reach logs and the next
// service even with no collector; they are exported only when the standard
// OTLP variables name an endpoint (http/protobuf: OTEL_EXPORTER_OTLP_ENDPOINT
// such as http://lgtm:4318). Every other OTEL_* variable the SDK knows
// (headers, timeouts, OTEL_METRIC_EXPORT_INTERVAL, OTEL_RESOURCE_ATTRIBUTES)
// applies as usual, and OTEL_TRACES_SAMPLER replaces the default sampler
// (see newSampler). Database queries with no span around them (River's
// polling) make no span: otelpgx starts one only under a recording parent. OTEL_EXPORTER_OTLP_PROTOCOL=grpc is refused: only
// http/protobuf is built in, which keeps gRPC out of every binary.
//
// Span attribute values are cut to 1024 bytes unless
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT or OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT
// sets another bound.
func Setup(ctx context.Context, cfg Config) (stop func(), err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	switch v := os.Getenv("OTEL_SDK_DISABLED"); {
	case strings.EqualFold(v, "true"):
		return func() {}, nil
	case v != "" && !strings.EqualFold(v, "false"):
		// The specification reads anything else as false; a "yes" or a "1"
		// meant to turn telemetry off would leave it on without a word.
		return nil, fmt.Errorf("OTEL_SDK_DISABLED=%q is not a boolean: use true or false", v)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"} {
		if p := os.Getenv(name); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%s=%s: only http/protobuf is supported (port 4318)", name, p)
		}
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	exportTraces, exportMetrics := exporting()

	otel.SetErrorHandler(newErrorLogger(cfg.Logger))
	limits := sdktrace.NewSpanLimits() // reads the OTEL_*_LIMIT variables
	if limits.AttributeValueLengthLimit < 0 {
		limits.AttributeValueLengthLimit = defaultAttributeValueLength
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(limits)}
	if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		tpOpts = append(tpOpts, sdktrace.WithSampler(newSampler()))
	}
	if exportTraces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	otel.SetTracerProvider(tp)

	mpOpts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if exportMetrics {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			_ = tp.Shutdown(ctx)
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		var readerOpts []sdkmetric.PeriodicReaderOption
		if cfg.Metrics != nil {
			readerOpts = append(readerOpts, sdkmetric.WithProducer(otelprom.NewMetricProducer(otelprom.WithGatherer(cfg.Metrics))))
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, readerOpts...)))
	}
	mp := sdkmetric.NewMeterProvider(mpOpts...)
	otel.SetMeterProvider(mp)

	return sync.OnceFunc(func() {
		// Not the caller's context, which is usually cancelled by then.
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		// Both flush at once, so that a collector that does not answer
		// does not spend the whole budget on traces and leave none for
		// the last metrics.
		errs := make(chan error, 1)
		go func() { errs <- mp.Shutdown(ctx) }()
		if err := errors.Join(tp.Shutdown(ctx), <-errs); err != nil && cfg.Logger != nil {
			cfg.Logger.WarnContext(ctx, "flushing telemetry", slog.String("error", err.Error()))
		}
	}), nil
}

// newSampler samples every span. A caller's trace context is a parent, but
// not its sampling decision: a client sending "not sampled" would otherwise
// turn off the traces of the runs it starts, which outlive its request.
func newSampler() sdktrace.Sampler {
	return sdktrace.ParentBased(sdktrace.AlwaysSample(),
		sdktrace.WithRemoteParentNotSampled(sdktrace.AlwaysSample()))
}

// errorLogger logs the SDK's errors, at most one per errorLogInterval, with
// the count of those left out.
type errorLogger struct {
	logger  *slog.Logger
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func newErrorLogger(logger *slog.Logger) *errorLogger {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &errorLogger{logger: logger}
}

func (e *errorLogger) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if now.Sub(e.last) < errorLogInterval {
		e.dropped++
		e.mu.Unlock()
		return
	}
	dropped := e.dropped
	e.last, e.dropped = now, 0
	e.mu.Unlock()
	e.logger.Warn("telemetry", slog.String("error", Truncate(err.Error(), 512)), slog.Int("similar_errors_left_out", dropped))
}

func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = cfg.ServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if cfg.Version != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.Version))
	}
	if id := os.Getenv("HOSTNAME"); id != "" {
		attrs = append(attrs, attribute.String("service.instance.id", id))
	}
	// WithFromEnv reads OTEL_RESOURCE_ATTRIBUTES from the process
	// environment; ours come after it so OTEL_SERVICE_NAME wins, as the
	// specification says.
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
	if err != nil && res == nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	return res, nil
}
