// Package journeys is the marketplace's core: it spawns workers from the
// catalog into a runtime, runs actions in them behind the constraint gate,
// records every action in the audit log, and keeps the journeys' state in
// the store consistent with what the runtime actually runs (reconciliation
// on start, idle stops, orphan detection).
//
// The gate comes first, always: an action is decoded strictly, checked, and
// only an allowed action reaches the worker, through one MCP channel per
// journey (an exec session running the worker's MCP server).
package journeys
