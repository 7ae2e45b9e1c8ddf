//go:build !linux

package proctree

import (
	"context"
	"errors"
)

// Protect is not supported off Linux: worker servers run on Linux only.
func Protect() error { return errors.ErrUnsupported }

// Dumpable is not supported off Linux.
func Dumpable() (bool, error) { return false, errors.ErrUnsupported }

// Idle waits until ctx ends.
func Idle(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// A Sweeper is not supported off Linux.
type Sweeper struct{}

// NewSweeper is not supported off Linux.
func NewSweeper() (*Sweeper, error) { return nil, errors.ErrUnsupported }

// Begin returns a no-op.
func (*Sweeper) Begin() (end func()) { return func() {} }
