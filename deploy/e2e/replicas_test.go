//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// replicas: the stack runs two marketplaces on one database (the compose
// profile "replicas"). A journey spawned through the first is served by
// the second, which opens its own channel to the worker; the first is
// SIGKILLed and the journey goes on through the second, its count of
// actions whole; then the first starts again.
func (s *stack) replicas(ctx context.Context, t *testing.T) {
	t.Helper()
	first := s.connect(ctx, t, "client")
	second := s.connectTo(ctx, t, s.mark2URL, "client")
	if out, isErr := call(ctx, t, first, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "replicated"}); isErr {
		t.Fatalf("spawn_worker: %v", out)
	}
	act := func(name string, i int) {
		t.Helper()
		cs := first
		if name == "second" {
			cs = second
		}
		content := fmt.Sprintf("written through the %s marketplace, %d", name, i)
		if out, isErr := call(ctx, t, cs, "execute_in_worker", map[string]any{
			"journey_id": "replicated",
			"action":     map[string]any{"type": "write", "target": "replicas.txt", "content": content},
		}); isErr || out["executed"] != true {
			t.Fatalf("write %d through the %s marketplace: %v", i, name, out)
		}
		out, isErr := call(ctx, t, cs, "execute_in_worker", map[string]any{
			"journey_id": "replicated",
			"action":     map[string]any{"type": "read", "target": "replicas.txt"},
		})
		if isErr || !strings.Contains(fmt.Sprint(out["output"]), content) {
			t.Fatalf("read %d through the %s marketplace: %v", i, name, out)
		}
	}
	act("first", 0)
	act("second", 1)

	s.run(ctx, t, "kill", "-s", "SIGKILL", "marketplace")
	for i := 2; i < 6; i++ {
		act("second", i)
	}
	st, isErr := call(ctx, t, second, "get_worker_state", map[string]any{"journey_id": "replicated"})
	if isErr || st["state"] != "active" || st["action_count"] != float64(12) {
		t.Errorf("after the first marketplace was killed: %v, want active with 12 actions", st)
	}

	// The first comes back (its restart reconciles: the journey stays).
	s.run(ctx, t, "up", "-d", "marketplace")
	s.waitHTTP(ctx, t, s.markURL+"/healthz")
	again := s.connect(ctx, t, "client")
	if out, isErr := call(ctx, t, again, "stop_worker", map[string]any{"journey_id": "replicated", "workspace": "delete"}); isErr {
		t.Errorf("stop_worker through the restarted marketplace: %v", out)
	}
}
