package claude

import (
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

// TestConformance runs the backend conformance suite with the fake claude.
func TestConformance(t *testing.T) {
	t.Parallel()
	backendtest.Exercise(t, New(Config{Binary: fakeClaude(t)}), backendtest.Scripted{
		Script: scenarioScript,
		Env: func(script string) []string {
			// The fake only checks that a key is set.
			return []string{"FAKE_CLAUDE_SCRIPT=" + script, "ANTHROPIC_API_KEY=test-dummy-key"}
		},
		UnknownSession: "00000000-0000-4000-8000-000000000000",
	})
}

// scenarioScript writes a suite scenario as a fake claude script.
func scenarioScript(t *testing.T, s backendtest.Scenario) string {
	t.Helper()
	var steps []map[string]any
	if s.UnknownEvent {
		steps = append(steps, map[string]any{"unknown_event": true})
	}
	if s.Edit != nil {
		steps = append(steps, map[string]any{"write": map[string]any{"file_path": s.Edit.Path, "content": s.Edit.Content}})
	}
	if s.Fail != "" {
		steps = append(steps, map[string]any{"fail": s.Fail})
	}
	entry := writeScript(t, map[string]any{"steps": steps, "reply": s.Reply})
	return entry[len("FAKE_CLAUDE_SCRIPT="):]
}
