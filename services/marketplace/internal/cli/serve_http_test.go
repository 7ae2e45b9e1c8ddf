package cli_test

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/mcptest"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/pkg/telemetry"
	"github.com/meshwork/meshwork/pkg/telemetry/telemetrytest"
	"github.com/meshwork/meshwork/services/marketplace/internal/cli"
)

// `marketplace serve --transport http` in process: `marketplace
// healthcheck` passes against it (and fails against a path it does not
// serve); an MCP call over it is traced; on exit, the traces and the
// Prometheus registry's metrics are flushed to the OTLP endpoint.
// Not parallel: it sets the environment, and serve sets the process's
// telemetry globals.
func TestServeHTTPHealthcheckAndTelemetry(t *testing.T) {
	if err := exec.Command("docker", "version").Run(); err != nil {
		t.Fatal("serve needs a Docker engine")
	}
	collector := telemetrytest.NewCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("DATABASE_URL", pgtest.DSN(t))
	t.Setenv("MESHWORK_TOKENS", "alice=alice-token-0123456789abcdef")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	root := cli.NewRoot()
	root.SetArgs([]string{"serve", "--transport", "http", "--addr", addr, "--labels", "meshwork.test=cli-http-" + filepath.Base(t.TempDir())})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	// Ready when the health check passes.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := run(t, "healthcheck", "http://"+addr+"/healthz")
		if err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health check never passed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := run(t, "healthcheck", "http://"+addr+"/nothing-here"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("health check of a missing path: %v, want a 404 failure", err)
	}

	cs := mcptest.Connect(t, "http://"+addr+"/mcp", "alice-token-0123456789abcdef", &mcptest.Options{Sending: []mcp.Middleware{telemetry.ClientMiddleware()}})
	callCtx, span := telemetry.Tracer().Start(ctx, "cli-test-client")
	if _, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "list_workers", Arguments: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	span.End()
	_ = cs.Close()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	traces, metrics := collector.Raw("/v1/traces"), collector.Raw("/v1/metrics")
	for _, want := range []string{"meshwork-marketplace", "POST /mcp", "tools/call list_workers", "cli-test-client"} {
		if !strings.Contains(traces, want) {
			t.Errorf("the exported traces lack %q", want)
		}
	}
	for _, want := range []string{"meshwork_journeys_live", "meshwork_agent_runs_total", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("the exported metrics lack %q", want)
		}
	}
}

// serve that cannot listen returns its error: the warm pools' refiller and
// drain do not hold it open.
func TestServeReturnsWhenItCannotListen(t *testing.T) {
	if err := exec.Command("docker", "version").Run(); err != nil {
		t.Fatal("serve needs a Docker engine")
	}
	t.Setenv("DATABASE_URL", pgtest.DSN(t))
	t.Setenv("MESHWORK_TOKENS", "alice=alice-token-0123456789abcdef")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	root := cli.NewRoot()
	root.SetArgs([]string{"serve", "--transport", "http", "--addr", taken.Addr().String(), "--labels", "meshwork.test=cli-listen-" + filepath.Base(t.TempDir())})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Errorf("serve on a taken address: %v, want its listen error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve on a taken address did not return")
	}
}
