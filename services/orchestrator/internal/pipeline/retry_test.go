package pipeline_test

import (
	"math"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	r := &pipeline.Retry{MaxAttempts: 10, Backoff: meshtype.Duration(2 * time.Second), MaxInterval: meshtype.Duration(10 * time.Second)}
	for attempt, want := range map[int]time.Duration{0: 2 * time.Second, 1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 4: 10 * time.Second, 100: 10 * time.Second, math.MaxInt: 10 * time.Second} {
		if got := r.Delay(attempt); got != want {
			t.Errorf("Delay(%d) = %s, want %s", attempt, got, want)
		}
	}
	huge := &pipeline.Retry{Backoff: meshtype.Duration(time.Hour), MaxInterval: meshtype.Duration(math.MaxInt64)}
	if got := huge.Delay(math.MaxInt); got != time.Duration(math.MaxInt64) {
		t.Errorf("Delay overflowed: %s", got)
	}
	if got := (&pipeline.Retry{MaxInterval: meshtype.Duration(time.Minute)}).Delay(math.MaxInt); got != 0 {
		t.Errorf("a zero backoff waits %s", got)
	}
}

// Load fills in the retry defaults: the max interval is never below the
// backoff.
func TestRetryDefaults(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, `name: p
roles: {r: {via: mesh, repository: w}}
nodes:
  - {id: a, role: r, task: x, retry: {max_attempts: 2}}
  - {id: b, role: r, task: x, retry: {max_attempts: 2, backoff: 10m}}
  - {id: c, role: r, task: x, retry: {max_attempts: 2, backoff: 1s, max_interval: 1s}}
`)
	for id, want := range map[string][2]time.Duration{
		"a": {pipeline.DefaultBackoff, pipeline.DefaultMaxInterval},
		"b": {10 * time.Minute, 10 * time.Minute},
		"c": {time.Second, time.Second},
	} {
		n, _ := p.Node(id)
		if got := [2]time.Duration{time.Duration(n.Retry.Backoff), time.Duration(n.Retry.MaxInterval)}; got != want {
			t.Errorf("%s: backoff, max_interval = %v, want %v", id, got, want)
		}
	}
}
