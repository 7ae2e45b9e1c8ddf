package journeys

import (
	"errors"
	"fmt"
)

// Error is a failure to report to the client as is: its message says what
// was wrong and what to do. Anything else is an internal error, logged and
// reported without details.
type Error struct {
	Code string // stable, for clients to branch on: see the Code* constants
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Error codes.
const (
	CodeInvalidArgument = "invalid_argument"
	CodeNotFound        = "not_found"
	CodeConflict        = "conflict"
	CodeUnavailable     = "unavailable"
	// CodePermissionDenied: outside what the operator allows (a source
	// host or directory not on the allowlists).
	CodePermissionDenied = "permission_denied"
)

func invalid(format string, args ...any) error {
	return &Error{Code: CodeInvalidArgument, Msg: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &Error{Code: CodeNotFound, Msg: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &Error{Code: CodeConflict, Msg: fmt.Sprintf(format, args...)}
}

func unavailable(format string, args ...any) error {
	return &Error{Code: CodeUnavailable, Msg: fmt.Sprintf(format, args...)}
}

// AsError returns err's *Error, if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
