package agenthook_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
		Permissions struct {
			Deny []string `json:"deny"`
		} `json:"permissions"`
	}
	if err := json.Unmarshal([]byte(agenthook.Settings("/usr/local/bin/mesh-exec hook", "/workspace", []string{"**/.env", "certs/**", "odd(name)"})), &s); err != nil {
		t.Fatal(err)
	}
	// Grep and Glob search a directory the hook checks, and print what is
	// in it: the CLI's Read deny rules keep the denied files out, rooted
	// at the workspace (absolute, "//"), not at the repository the agent
	// works in.
	if want := []string{"Read(//workspace/**/.env)", "Read(//workspace/certs/**)"}; !slices.Equal(s.Permissions.Deny, want) {
		t.Errorf("deny rules %q, want %q", s.Permissions.Deny, want)
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

// FuzzAnswerNamesItsCall decides PreToolUse events whose input the agent
// writes (a path, a command, the call's id) and reads the answer back as
// mesh-exec does: the answer always names the event's own call (or none,
// for an id the answer cannot carry), never one quoted from the input, and a
// refusal always parses back into its violations.
func FuzzAnswerNamesItsCall(f *testing.F) {
	ws := f.TempDir()
	policy, _ := json.Marshal(agenthook.Policy{Workspace: ws, Definition: meshtype.Definition{
		ID: "a_v1", Kind: meshtype.KindAgent,
		Constraints: meshtype.Constraints{DeniedPaths: []string{"**/*.env"}, Commands: []string{"go test", "ls"}},
		Agent:       &meshtype.AgentSpec{Backend: "claude", AllowedTools: []string{"Read", "Bash"}},
	}})
	decider, err := agenthook.NewDecider(string(policy))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct{ tool, arg, id string }{
		{"Read", "x(tool_use_id: toolu_a).env", "toolu_b"},
		{"Read", "main.go", "toolu_a"},
		{"Bash", "cat '(tool_use_id: toolu_a)'", "toolu_b"},
		{"Bash", "ls", "toolu_b)"},
		{"Read", "../../etc/passwd\n(tool_use_id: toolu_a)", ""},
		{"Write", "notes.md", "a\nb"},
	} {
		f.Add(seed.tool, seed.arg, seed.id)
	}
	f.Fuzz(func(t *testing.T, tool, arg, id string) {
		input := map[string]any{"file_path": filepath.Join(ws, arg)}
		if tool == "Bash" {
			input = map[string]any{"command": arg}
		}
		event, _ := json.Marshal(map[string]any{
			"hook_event_name": "PreToolUse", "cwd": ws, "tool_name": tool, "tool_input": input, "tool_use_id": id,
		})
		var sent struct { // the id as the hook reads it (JSON makes invalid UTF-8 valid)
			ToolUseID string `json:"tool_use_id"`
		}
		if err := json.Unmarshal(event, &sent); err != nil {
			t.Fatal(err)
		}
		want := sent.ToolUseID
		if want == "" || strings.ContainsAny(want, ")\n") {
			want = ""
		}
		a := decider.Answer(event)
		if a.Code != 0 {
			t.Fatalf("a well-formed event answered with status %d: %q", a.Code, a.Stderr)
		}
		answer := a.Stdout
		if strings.HasPrefix(answer, "{") {
			var o struct {
				HookSpecificOutput struct {
					PermissionDecision       string `json:"permissionDecision"`
					PermissionDecisionReason string `json:"permissionDecisionReason"`
				} `json:"hookSpecificOutput"`
			}
			if err := json.Unmarshal([]byte(answer), &o); err != nil || o.HookSpecificOutput.PermissionDecision != "deny" {
				t.Fatalf("a JSON answer that is not a refusal: %q (%v)", answer, err)
			}
			answer = o.HookSpecificOutput.PermissionDecisionReason
			if vs, ok := agenthook.ParseReason(answer); !ok || len(vs) == 0 {
				t.Fatalf("a refusal that does not parse back: %q", answer)
			}
		} else if !strings.HasPrefix(answer, "Meshwork gate: allowed") {
			t.Fatalf("an answer that neither allows nor refuses: %q", answer)
		}
		if got := agenthook.ToolUseID(answer); got != want {
			t.Fatalf("the answer names the call %q, want %q: %q", got, want, answer)
		}
	})
}

// RealPath reads a path as the kernel does: a ".." after a symbolic link is
// the link's target's parent, so l/../.gitconfig, with l a link into the
// agent's home, is the home's .gitconfig, not the workspace's.
func TestRealPathFollowsALinkBeforeItsDotDot(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".meshwork/home/.claude"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".meshwork/home/.claude", filepath.Join(ws, "l")); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		ws + "/l/../.gitconfig":      real + "/.meshwork/home/.gitconfig",
		ws + "/l/new/../x":           real + "/.meshwork/home/.claude/x",
		ws + "/sub/../.gitconfig":    real + "/.gitconfig",
		ws + "/./l/settings.json":    real + "/.meshwork/home/.claude/settings.json",
		ws + "/l/../../home/.bashrc": real + "/.meshwork/home/.bashrc",
	} {
		got, err := agenthook.OSFiles{}.RealPath(in)
		if err != nil || got != want {
			t.Errorf("RealPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
