// Package workerdef loads worker definitions (workers/*.yaml) into a
// [Catalog].
//
// Loading is strict. Unknown fields, wrong types, bad sizes and durations,
// duplicate keys, an unknown or cyclic extends, bad globs and CEL rules that do
// not compile are all reported as "file:line:col: message", every error in a
// catalog at once rather than only the first.
//
// A definition may extend another: the base's YAML is deep-merged under it
// (maps merge, lists replace) before decoding, and the package defaults sit
// under every chain. Positions are kept through the merge, so an error always
// points at the file and line where the offending value was written.
package workerdef
