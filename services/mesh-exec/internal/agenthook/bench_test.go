package agenthook_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/agenthook"
)

// BenchmarkHookDecision is what the agent waits for before each tool call:
// the real mesh-exec binary started as `mesh-exec hook`, deciding a Bash
// command of 10 simple commands (goal: p50 under 2 ms, process start
// included), side by side with the baseline of starting a process that
// does nothing (the same binary's `version`).
func BenchmarkHookDecision(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "mesh-exec")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/meshwork/meshwork/services/mesh-exec/cmd/mesh-exec").CombinedOutput(); err != nil {
		b.Fatalf("building mesh-exec: %v\n%s", err, out)
	}
	policy, _ := json.Marshal(agenthook.Policy{Workspace: b.TempDir(), Definition: meshtype.Definition{
		ID: "agent_v1", Kind: meshtype.KindAgent,
		Constraints: meshtype.Constraints{
			MaxFileSize: 1 << 20, DeniedPaths: []string{"**/.env", "**/*.pem", ".meshwork/**"},
			Commands: []string{"go test", "go vet", "git diff", "ls", "grep"},
			Rules:    []meshtype.Rule{{ID: "no_rm", Expression: "action.type != 'exec' || action.command[0] != 'rm'"}},
		},
		Agent: &meshtype.AgentSpec{Backend: "claude", AllowedTools: []string{"Read", "Edit", "Bash"}},
	}})
	event, _ := json.Marshal(map[string]any{
		"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "toolu_1", "cwd": "/workspace",
		"tool_input": map[string]any{"command": "go vet ./... && go test ./... 2>&1 | grep -v ok; git diff --stat; ls pkg; " +
			"go test -run TestA ./a && go test -run TestB ./b; git diff HEAD; ls -la; grep -rn TODO ."},
	})
	env := append(os.Environ(), agenthook.PolicyEnv+"="+string(policy))
	run := func(b *testing.B, args []string, stdin []byte) {
		b.Helper()
		lat := make([]time.Duration, 0, b.N)
		for b.Loop() {
			cmd := exec.Command(bin, args...)
			cmd.Env, cmd.Stdin = env, bytes.NewReader(stdin)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %v\n%s", args, err, out)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
	b.Run("hook", func(b *testing.B) { run(b, []string{"hook"}, event) })
	b.Run("baseline=process-start", func(b *testing.B) { run(b, []string{"version"}, nil) })
}
