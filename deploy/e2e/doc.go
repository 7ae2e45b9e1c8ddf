// Package e2e is the end-to-end test of the compose stack (`make e2e`): it
// builds nothing itself, brings up deploy/compose.yaml's core services from
// the offline images with the FAKE claude in mesh-exec and a test OTLP
// receiver (otlpsink) in place of the collector, and drives it as users
// do: an MCP client over HTTP with a token, and meshctl. The test is behind
// the e2e build tag so that `make test` does not start the stack.
package e2e
