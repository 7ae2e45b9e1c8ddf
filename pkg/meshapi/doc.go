// Package meshapi is the contract between Meshwork's MCP servers (the
// marketplace, mesh-exec and the orchestrator) and their clients, written
// once: the tool names, mesh_execute's input and output, the _meta keys,
// the id pattern, and the error codes a client may branch on, which every
// tool error carries in its structured content ([Error], [ErrorOf]).
//
// The action and definition types the gate checks are in meshtype; this
// package holds what travels between services over MCP.
package meshapi
