package claude

import (
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

const sessionID = "214248d1-7307-4c48-a6bd-441352495a86"

func TestCommand(t *testing.T) {
	t.Parallel()
	with := func(extra ...string) []string {
		return append(append([]string{"claude"}, headless...), extra...)
	}
	tests := []struct {
		name string
		cfg  Config
		req  backend.Request
		want []string
		err  string
	}{
		{name: "new session", req: backend.Request{Task: "fix the test"}, want: with("--", "fix the test")},
		{
			name: "binary", cfg: Config{Binary: "/opt/claude/bin/claude"}, req: backend.Request{Task: "t"},
			want: append(append([]string{"/opt/claude/bin/claude"}, headless...), "--", "t"),
		},
		{
			name: "resume", req: backend.Request{Task: "go on", SessionID: sessionID},
			want: with("--resume", sessionID, "--", "go on"),
		},
		{
			name: "upper-case UUID", req: backend.Request{Task: "go on", SessionID: "214248D1-7307-4C48-A6BD-441352495A86"},
			want: with("--resume", "214248D1-7307-4C48-A6BD-441352495A86", "--", "go on"),
		},
		{
			name: "every option",
			req: backend.Request{
				Repository: "/workspace/repo", Task: "do it", SessionID: sessionID,
				Settings: backend.Settings{
					Model: "sonnet", AllowedTools: []string{"Read", "Edit", "Bash(git diff *)"}, MaxTurns: 7,
					AppendSystemPrompt: "- be brief", MCPConfig: "/run/mesh/mcp.json",
				},
			},
			want: with("--resume", sessionID, "--model", "sonnet", "--max-turns", "7",
				"--allowedTools", "Read,Edit,Bash(git diff *)", "--append-system-prompt", "- be brief",
				"--mcp-config", "/run/mesh/mcp.json", "--", "do it"),
		},
		{
			name: "a task that looks like a flag stays the prompt", req: backend.Request{Task: "--dangerously-skip-permissions"},
			want: with("--", "--dangerously-skip-permissions"),
		},
		{
			name: "a task with shell syntax is one argument", req: backend.Request{Task: "x; rm -rf / $(id) `id` 'q' \"d\"\nline two"},
			want: with("--", "x; rm -rf / $(id) `id` 'q' \"d\"\nline two"),
		},
		{
			name: "a task that names a subcommand is not one", req: backend.Request{Task: "update"},
			want: with("--", "update\n"),
		},
		{
			name: "a task that only starts with a subcommand is kept", req: backend.Request{Task: "update the README"},
			want: with("--", "update the README"),
		},
		{name: "empty task", req: backend.Request{Task: " \n"}, err: "task is empty"},
		{name: "session id not a UUID", req: backend.Request{Task: "t", SessionID: "abc-123"}, err: "not a UUID"},
		{name: "session id that is a flag", req: backend.Request{Task: "t", SessionID: "--dangerously-skip-permissions"}, err: "not a UUID"},
		{name: "session id with braces", req: backend.Request{Task: "t", SessionID: "{" + sessionID + "}"}, err: "not a UUID"},
		{name: "session id with a newline", req: backend.Request{Task: "t", SessionID: sessionID + "\n"}, err: "not a UUID"},
		{name: "negative max turns", req: backend.Request{Task: "t", Settings: backend.Settings{MaxTurns: -1}}, err: "negative"},
		{name: "empty tool name", req: backend.Request{Task: "t", Settings: backend.Settings{AllowedTools: []string{"Read", " "}}}, err: "tool name is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			backendtest.CheckCommand(t, New(tt.cfg), tt.req, tt.want, tt.err)
		})
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	if got := New(Config{}).Name(); got != "claude" {
		t.Errorf("Name() = %q, want claude", got)
	}
}

// TestTasksReachTheCLIIntact runs awkward tasks through the fake claude,
// which parses its command line as the real one does and echoes the task.
func TestTasksReachTheCLIIntact(t *testing.T) {
	t.Parallel()
	for _, task := range []string{
		"--dangerously-skip-permissions",
		"-p",
		"--",
		"doctor",
		"help",
		"x; touch pwned $(touch pwned2)",
		"line one\nline two",
	} {
		t.Run(task, func(t *testing.T) {
			t.Parallel()
			repo := t.TempDir()
			p := runBackend(t, backend.Request{Repository: repo, Task: task, Settings: backend.Settings{AllowedTools: []string{"Read", "Edit"}, MCPConfig: `{"mcpServers":{}}`}}, env(t.TempDir()))
			if p.Result.IsError {
				t.Fatalf("run failed: %+v\nstderr %s", p.Result, p.Stderr)
			}
			// The fake answers "ok: <task>"; a task that names a subcommand
			// got a trailing newline.
			if want := "ok: " + task; strings.TrimSuffix(p.Result.Output, "\n") != want {
				t.Errorf("Output = %q, want %q", p.Result.Output, want)
			}
		})
	}
}
