// Package gate is the constraint gate: it decides whether an action may run
// in a worker, before anything runs.
//
// A [Gate] is compiled once per worker definition; [Gate.Evaluate] then checks
// one action against every constraint and returns every violation, not just
// the first. Evaluate does no I/O and keeps no state between calls, so it is
// safe for concurrent use and its decision depends only on its inputs.
//
// Built-in constraints are plain Go: the tools allowlist, readonly,
// max_file_size, lexical path safety, allowed and denied globs, the argv-prefix
// command allowlist (with the arguments of go and git parsed against tables of
// their allowed subcommands and flags), max_actions and max_cost_usd. User
// rules are CEL programs type-checked at compile time and run with a cost
// limit; a rule that errors or runs out of budget is a violation (the gate
// fails closed).
//
// The same Gate is also the result gate, on what leaves a worker:
// [Gate.EvaluateResult] checks a workspace's change (a [meshtype.ChangeSummary],
// computed whenever a diff or an export is asked for) against the
// definition's result block: max_changed_files, max_diff_bytes, denied globs
// on every changed path (both sides of a rename), lexical path safety, and
// CEL rules over the summary, which they see as `result`. Result rules run in
// their own CEL environment, with the same cost limit and fail-closed handling
// as action rules.
//
// The decision is not the enforcement: executors still confine file access to
// the workspace with os.Root, limit sizes while streaming and run commands
// without a shell. The gate's job is to refuse early and explain why.
package gate
