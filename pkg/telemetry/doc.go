// Package telemetry is Meshwork's OpenTelemetry setup, shared by every
// service: traces and metrics over OTLP, slog records that carry the trace
// and span ids, and the trace context carried across MCP calls in
// params._meta ("traceparent", "tracestate"), so that one pipeline run is
// one trace from the orchestrator through the marketplace and its gate to
// mesh-exec and the agent's tool uses.
//
// Span names and attributes follow the OpenTelemetry GenAI and MCP
// semantic conventions: "invoke_agent {agent}", "execute_tool {tool}",
// "{mcp.method.name} {target}" for MCP requests, gen_ai.usage.* for tokens.
// The attribute keys are declared here because the semconv package of the
// OpenTelemetry version we use does not have the GenAI and MCP ones yet.
package telemetry
