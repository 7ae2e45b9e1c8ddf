package journeys

import (
	"errors"
	"fmt"

	"github.com/meshwork/meshwork/services/marketplace/internal/store"
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
	// CodeResourceExhausted: a quota of the operator's is used up (live
	// journeys); the request may pass once something is freed.
	CodeResourceExhausted = "resource_exhausted"
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

// quotaError turns the store's refused admission into the client's error,
// naming the limit by its setting; anything else is returned as is.
func quotaError(err error) error {
	var q *store.QuotaError
	if !errors.As(err, &q) {
		return err
	}
	if q.Total {
		return &Error{Code: CodeResourceExhausted, Msg: fmt.Sprintf(
			"quota: this marketplace has %d live journeys, the limit (--max-journeys) is %d; stop one of yours with stop_worker or try again later", q.Live, q.Limit)}
	}
	return &Error{Code: CodeResourceExhausted, Msg: fmt.Sprintf(
		"quota: caller %q has %d live journeys, the limit (--max-journeys-per-caller) is %d; stop one with stop_worker", q.Caller, q.Live, q.Limit)}
}

// AsError returns err's *Error, if it is one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
