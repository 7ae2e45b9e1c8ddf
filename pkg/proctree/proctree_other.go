//go:build !linux

package proctree

import (
	"context"
	"errors"
	"log/slog"
)

// Protect does nothing off Linux, where servers run only with the process
// runtime (no container, no isolation to keep): they still start.
func Protect() error { return nil }

// Dumpable is not supported off Linux.
func Dumpable() (bool, error) { return false, errors.ErrUnsupported }

// Idle waits until ctx ends.
func Idle(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// Announce does nothing off Linux.
func Announce() (bool, error) { return false, nil }

// A Sweeper is not supported off Linux.
type Sweeper struct{}

// NewSweeper returns nil off Linux: commands are ended by process group
// only.
func NewSweeper(*slog.Logger) (*Sweeper, error) { return nil, nil }

// A Command is a no-op off Linux.
type Command struct{}

// Begin returns a no-op Command; nil for a nil Sweeper, as on Linux.
func (s *Sweeper) Begin() *Command {
	if s == nil {
		return nil
	}
	return &Command{}
}

// Started does nothing.
func (*Command) Started(int) {}

// End does nothing.
func (*Command) End() {}

// Subreaper reports false: only Linux has child subreapers.
func (s *Sweeper) Subreaper() bool { return false }
