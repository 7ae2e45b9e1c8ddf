// Package action decodes actions, the JSON requests clients send to workers,
// into the one canonical [meshtype.Action] that both the gate and the executor
// use.
//
// Decoding is strict because the input is untrusted: unknown fields, duplicate
// keys, keys that differ only in case ("Target" beside "target", at any depth,
// arguments included), fields that the action type does not use, and
// malformed values are all refused with an [*Error] saying which field is
// wrong. What decodes is well-formed; whether it is allowed is the gate's
// decision.
package action
