package pipeline

import (
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// The retry defaults.
const (
	// DefaultBackoff is the wait before the first retry when a retry block
	// does not say.
	DefaultBackoff = time.Second
	// DefaultMaxInterval caps the wait between attempts when a retry block
	// does not say (or the backoff, if that is longer).
	DefaultMaxInterval = 5 * time.Minute
)

// Retry is a node's retry policy: the wait doubles after each failed
// attempt, from Backoff up to MaxInterval.
type Retry struct {
	// MaxAttempts is how many attempts a node gets in all, the first
	// included: 1 means no retry. At least 1; defaults to 1.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// Backoff is the wait after the first failed attempt. Defaults to
	// DefaultBackoff.
	Backoff meshtype.Duration `yaml:"backoff" json:"backoff"`
	// MaxInterval caps the wait. At least Backoff; defaults to
	// DefaultMaxInterval, or Backoff if that is longer.
	MaxInterval meshtype.Duration `yaml:"max_interval" json:"max_interval"`
}

// Delay returns how long to wait after failed attempt number attempt
// (counted from 1) before the next one: Backoff × 2^(attempt-1), at most
// MaxInterval.
func (r *Retry) Delay(attempt int) time.Duration {
	d, limit := time.Duration(r.Backoff), time.Duration(r.MaxInterval)
	for i := 1; i < attempt && d > 0 && d < limit; i++ {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}
