package pipeline

import (
	"cmp"
	"slices"

	"github.com/meshwork/meshwork/pkg/workerdef"
)

// Error is one problem in a pipeline file, at a position in it; it prints as
// "file:line:col: message". It is the error type of package workerdef, whose
// decoder reads pipelines too, so both formats report problems alike.
type Error = workerdef.Error

// Errors is every problem [Load] or [LoadDir] found, in file and position
// order.
type Errors = workerdef.Errors

// sortErrors orders errors by file, line and column, keeping the order they
// were found in for one position, and drops exact repeats.
func sortErrors(es Errors) Errors {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	return slices.CompactFunc(es, func(a, b *Error) bool { return *a == *b })
}
