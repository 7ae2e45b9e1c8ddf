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
	"github.com/meshwork/meshwork/services/mesh-exec/internal/hookwire"
)

// BenchmarkHookDecision is what the agent waits for before each tool call:
// a Bash command of 10 simple commands decided (goal: p50 under 2 ms,
// process start included), side by side, by
//   - fast: mesh-exec-hook asking a decider that compiled the policy once
//     (what agent workers run), over the abstract socket;
//   - hook: `mesh-exec hook`, which compiles the policy itself (the
//     fallback without mesh-exec-hook);
//   - baseline=process-start: mesh-exec doing nothing (`version`);
//   - baseline=true: true(1), the floor of starting any process here.
func BenchmarkHookDecision(b *testing.B) {
	dir := b.TempDir()
	bin, hookBin := filepath.Join(dir, "mesh-exec"), filepath.Join(dir, "mesh-exec-hook")
	for out, pkg := range map[string]string{bin: "cmd/mesh-exec", hookBin: "cmd/mesh-exec-hook"} {
		if msg, err := exec.Command("go", "build", "-o", out, "github.com/meshwork/meshwork/services/mesh-exec/"+pkg).CombinedOutput(); err != nil {
			b.Fatalf("building %s: %v\n%s", pkg, err, msg)
		}
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
	decider, err := agenthook.NewDecider(string(policy))
	if err != nil {
		b.Fatal(err)
	}
	ln, addr, err := hookwire.Listen()
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() { _ = hookwire.Serve(ln, decider.Answer) }()
	env := append(os.Environ(), agenthook.PolicyEnv+"="+string(policy), hookwire.SocketEnv+"="+addr)
	run := func(b *testing.B, bin string, args []string, stdin []byte) {
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
	b.Run("fast", func(b *testing.B) { run(b, hookBin, nil, event) })
	b.Run("hook", func(b *testing.B) { run(b, bin, []string{"hook"}, event) })
	b.Run("baseline=process-start", func(b *testing.B) { run(b, bin, []string{"version"}, nil) })
	// The floor: starting the smallest program there is, here.
	if truePath, err := exec.LookPath("true"); err == nil {
		b.Run("baseline=true", func(b *testing.B) { run(b, truePath, nil, nil) })
	}
}
