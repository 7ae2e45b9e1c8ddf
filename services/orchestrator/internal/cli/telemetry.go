package cli

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshwork/meshwork/pkg/buildinfo"
	"github.com/meshwork/meshwork/pkg/telemetry"
)

// serviceName is the orchestrator's OpenTelemetry service.name (unless
// OTEL_SERVICE_NAME says otherwise).
const serviceName = "meshwork-orchestrator"

// flushTimeout bounds the last export of spans and metrics on the way out:
// a collector that is gone must not hold up a shutdown.
const flushTimeout = 5 * time.Second

// startTelemetry installs the OpenTelemetry providers (OTLP export when
// OTEL_EXPORTER_OTLP_ENDPOINT is set), exporting metrics too when not nil;
// the SDK's own errors go to logger. The returned stop flushes and stops
// them, within flushTimeout, the first time it is called.
func startTelemetry(ctx context.Context, getenv func(string) string, metrics prometheus.Gatherer, logger *slog.Logger) (stop func(), err error) {
	shutdown, err := telemetry.Setup(ctx, telemetry.Config{
		ServiceName: serviceName, Version: buildinfo.Version, Metrics: metrics, Getenv: getenv, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	return sync.OnceFunc(func() { telemetry.Flush(shutdown, flushTimeout, logger) }), nil
}
