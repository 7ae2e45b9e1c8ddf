package journeys

import (
	"errors"
	"fmt"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// Error is a failure to report to the client as is: its message says what
// was wrong and what to do, its code (meshapi.Code) lets a program decide.
// Anything else is an internal error, logged and reported without details.
type Error = meshapi.Error

// The error codes the marketplace uses (meshapi's).
const (
	CodeInvalidArgument   = meshapi.CodeInvalidArgument
	CodeNotFound          = meshapi.CodeNotFound
	CodeConflict          = meshapi.CodeConflict
	CodeNotLive           = meshapi.CodeNotLive
	CodeUnavailable       = meshapi.CodeUnavailable
	CodePermissionDenied  = meshapi.CodePermissionDenied
	CodeResourceExhausted = meshapi.CodeResourceExhausted
)

func invalid(format string, args ...any) error {
	return &Error{Code: CodeInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) error {
	return &Error{Code: CodeConflict, Message: fmt.Sprintf(format, args...)}
}

func unavailable(format string, args ...any) error {
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf(format, args...)}
}

// quotaError turns the store's refused admission into the client's error,
// naming the limit by its setting; anything else is returned as is.
func quotaError(err error) error {
	var q *store.QuotaError
	if !errors.As(err, &q) {
		return err
	}
	if q.Total {
		return &Error{Code: CodeResourceExhausted, Message: fmt.Sprintf(
			"quota: this marketplace has %d live journeys, the limit (--max-journeys) is %d; stop one of yours with stop_worker or try again later", q.Live, q.Limit)}
	}
	return &Error{Code: CodeResourceExhausted, Message: fmt.Sprintf(
		"quota: caller %q has %d live journeys, the limit (--max-journeys-per-caller) is %d; stop one with stop_worker", q.Caller, q.Live, q.Limit)}
}

// AsError returns err's *Error, if it is one.
func AsError(err error) (*Error, bool) { return meshapi.AsError(err) }
