package agenthook_test

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/agenthook"
)

func TestReasonRoundTrip(t *testing.T) {
	t.Parallel()
	vs := []meshtype.Violation{
		{ConstraintID: "denied_paths", Violated: true, Message: `path ".env" is denied by "**/.env"`},
		{ConstraintID: "commands", Violated: true, Message: "two\nlines: with a colon"},
	}
	got, ok := agenthook.ParseReason(agenthook.Reason(vs))
	vs[1].Message = "two lines: with a colon"
	if !ok || !reflect.DeepEqual(got, vs) {
		t.Fatalf("ParseReason(Reason(vs)) = %+v, %v", got, ok)
	}
	if id := agenthook.ToolUseID("Meshwork gate: allowed (tool_use_id: toolu_01ab)\n"); id != "toolu_01ab" {
		t.Fatalf("ToolUseID = %q", id)
	}
	if _, ok := agenthook.ParseReason("some other hook's words"); ok {
		t.Fatal("ParseReason took a text that is not a Reason")
	}
}

// The hook fails closed: every error is exit status 2, which blocks the
// tool; a refusal is Claude Code's JSON deny decision with exit status 0.
func TestRun(t *testing.T) {
	t.Parallel()
	policy, _ := json.Marshal(agenthook.Policy{Workspace: "/workspace", Definition: meshtype.Definition{
		ID: "a_v1", Kind: meshtype.KindAgent, Constraints: meshtype.Constraints{DeniedPaths: []string{"**/.env"}},
	}})
	env := func(p string) func(string) string {
		return func(k string) string {
			if k == agenthook.PolicyEnv {
				return p
			}
			return ""
		}
	}
	pre := `{"hook_event_name":"PreToolUse","cwd":"/workspace","tool_name":"Read","tool_input":{"file_path":"/workspace/.env"},"tool_use_id":"t1"}`
	for _, tc := range []struct {
		name, stdin, policy string
		code                int
		stdout, stderr      string
	}{
		{"denied", pre, string(policy), 0, `"permissionDecision":"deny","permissionDecisionReason":"Refused by the Meshwork gate before it ran:\n- denied_paths: path \".env\" is denied by \"**/.env\"\n(tool_use_id: t1)"`, ""},
		{"allowed", strings.Replace(pre, ".env", "main.go", 1), string(policy), 0, "Meshwork gate: allowed (tool_use_id: t1)\n", ""},
		{"no policy", pre, "", 2, "", "no policy"},
		{"bad policy", pre, "{", 2, "", "does not decode"},
		{"policy that does not compile", pre, `{"workspace":"/w","definition":{"constraints":{"rules":[{"id":"r","expression":"nope("}]}}}`, 2, "", "does not compile"},
		{"relative workspace", pre, `{"workspace":"w","definition":{}}`, 2, "", "not an absolute path"},
		{"event not JSON", "nope", string(policy), 2, "", "not JSON"},
		{"no event name", `{"tool_name":"Read"}`, string(policy), 2, "", "no hook_event_name"},
		{"other events acknowledged", `{"hook_event_name":"PostToolUse"}`, "", 0, "", ""},
		{"notification echoed", `{"hook_event_name":"Notification","message":"waiting"}`, "", 0, "waiting", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := agenthook.Run(strings.NewReader(tc.stdin), &stdout, &stderr, env(tc.policy))
			if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || (tc.stdout == "" && stdout.Len() > 0) || !strings.Contains(stderr.String(), tc.stderr) {
				t.Fatalf("Run = %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}
		})
	}
}

func TestSettings(t *testing.T) {
	t.Parallel()
	var s struct {
		Hooks map[string][]struct {
			Matcher string `json:"matcher"`
			Hooks   []struct{ Type, Command string }
		} `json:"hooks"`
	}
	if err := json.Unmarshal([]byte(agenthook.Settings("/usr/local/bin/mesh-exec hook")), &s); err != nil {
		t.Fatal(err)
	}
	pre := s.Hooks["PreToolUse"]
	if len(pre) != 1 || pre[0].Matcher != "*" || pre[0].Hooks[0].Type != "command" || pre[0].Hooks[0].Command != "/usr/local/bin/mesh-exec hook" {
		t.Fatalf("PreToolUse hooks: %+v", pre)
	}
	if len(s.Hooks) != len(agenthook.Events) {
		t.Fatalf("%d events hooked, want %d", len(s.Hooks), len(agenthook.Events))
	}
}

// A FIFO named by an Edit does not hold the hook: ReadFile refuses it at
// once instead of waiting for a writer.
func TestReadFileRefusesAFIFO(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := (agenthook.OSFiles{}).ReadFile(p, 100); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("ReadFile of a FIFO: %v", err)
	}
}
