// Package meshtype holds the data types every part of Meshwork shares: the
// worker definition, the action, the constraint violation and the journey
// state the gate sees.
//
// It is a leaf package: it imports nothing of Meshwork's own, so the loader,
// the gate, the marketplace and the orchestrator can all depend on it without
// depending on each other.
package meshtype
