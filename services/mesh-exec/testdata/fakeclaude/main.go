// Command fakeclaude is a TEST DOUBLE of Anthropic's Claude Code CLI
// (`claude`, version 2.1.330), for mesh-exec's tests. It is never a default:
// it lives under testdata (outside ./...), tests build it explicitly
//
//	go build -o DIR/claude github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeclaude
//
// and `make test-images` puts it in the test-only image
// meshwork/claude-worker-fake:test. It uses no cgo and runs no other
// program, so it works in a FROM scratch image.
//
// It follows the real CLI wherever mesh-exec depends on it; the captures in
// services/mesh-exec/internal/backend/claude/testdata/claude-code-2.1.330 are
// the ground truth, and the claude backend's tests check the fake's output
// against them.
//
// # Flags
//
// Headless only: -p/--print is required. Implemented: -p, --output-format
// text|json|stream-json (stream-json needs --verbose, with the CLI's own
// error), --verbose, -r/--resume ID, -c/--continue, --fork-session,
// --session-id UUID, --model, --max-turns (hidden in the real --help),
// --allowedTools/--allowed-tools, --disallowedTools/--disallowed-tools,
// --tools, --append-system-prompt, --system-prompt, --mcp-config,
// --strict-mcp-config, --permission-mode, --dangerously-skip-permissions,
// --no-session-persistence, --add-dir, --settings, --setting-sources,
// --include-hook-events, -v/--version, -h/--help. Other real
// options are refused as not implemented; unknown ones as the CLI's parser
// (commander) does: "error: unknown option '--x'", exit 1. "--" ends the
// options; a first positional argument that names a subcommand (doctor,
// update, ...) is refused, as the real CLI would run that subcommand.
//
// # Sessions
//
// A session is $HOME/.claude/projects/<cwd with every non-alphanumeric
// character replaced by "-">/<session id>.jsonl, one line appended per turn.
// --resume looks in the cwd's project directory first, then in every other
// one (the real CLI finds a session from another cwd too; see
// resume-other-cwd.jsonl) and appends to the file where it found it. An
// unknown id prints "No conversation found with session ID: <id>" on stderr
// and a single error_during_execution result, and exits 1.
//
// # Credentials
//
// Without ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN in its environment it
// answers like the real CLI when not logged in: init, a synthetic assistant
// message (error "authentication_failed"), a result with is_error true and
// "Not logged in · Please run /login", exit 1. Any non-empty value logs in.
//
// # Scripts
//
// FAKE_CLAUDE_SCRIPT names a JSON file that says what the "agent" does;
// without it, a .fake-claude.json in the working directory is the script
// (so a repository under test can carry it into a worker container), and
// without either it replies "ok: <task>" at a cost of $0.0012. The format:
//
//	{
//	  "steps": [                        // run in order
//	    {"text": "Looking at the code."},                    // an assistant text message
//	    {"write": {"file_path": "notes/a.md", "content": "hi\n"}},  // Write tool: creates or replaces the file
//	    {"edit": {"file_path": "main.go", "old_string": "a", "new_string": "b", "replace_all": false}},  // Edit tool
//	    {"read": {"file_path": "main.go"}},                  // Read tool: the file's lines, numbered
//	    {"bash": "go test ./... && echo ok"},               // Bash tool, run by a shell interpreter
//	    {"tool": {"name": "Glob", "input": {"pattern": "*"}}},  // any other tool: hooks run, nothing else
//	    {"notification": "Claude is waiting"},              // the Notification hooks run
//	    {"mcp_call": {"server": "meshwork", "tool": "spawn_worker", "arguments": {"worker_id": "x"}, "save_as": "out.json"}},
//	    {"unknown_event": true},        // an event of a type no parser knows
//	    {"event": {"type": "anything"}}, // this JSON object, printed as one line
//	    {"stderr": "a line for stderr"},
//	    {"fail": "the message"},        // an is_error result with this message, exit 1; later steps are skipped
//	    {"crash": {"exit_code": 3, "stderr": "boom"}},  // exit with no result event
//	    {"hang": {"pid_file": "/tmp/p", "ignore_sigterm": false, "child_ignores_sigterm": false}},
//	    {"sleep_ms": 1500}              // a slow turn: pause, then go on
//	  ],
//	  "reply": "Done.",       // the final answer; default: the last text step, else "ok: <task>"
//	  "cost_usd": 0.25,       // total_cost_usd; default 0.0012
//	  "input_tokens": 120,    // usage; defaults 12 and 3
//	  "output_tokens": 30,
//	  "turns": [ {...}, {...} ] // instead of the above: one script per turn of the
//	                            // session (the first run is turns[0], its first resume
//	                            // turns[1], ...; the last one repeats; a fork goes on
//	                            // counting from the turns it copied)
//	}
//
// Relative file paths are taken from the cwd; tool_use events carry the
// absolute path, as the real CLI's do. A failed write or edit is reported as
// an is_error tool_result, like the real tools, and the run goes on.
//
// mcp_call calls the tool on the MCP server of that name in --mcp-config
// (type "http": {"url", "headers"}; "${VAR}" in headers is expanded from the
// environment), over streamable HTTP, as tool mcp__<server>__<tool>; the
// tool_result holds the tool's text content (is_error when the tool or the
// call failed); with save_as, the "agent" then writes that text into the
// file named (a Write tool call). Other server types are reported as a
// failed tool call.
//
// hang starts a child (this binary again) that sleeps in the same process
// group, writes "P C" (the fake's pid and the child's) to pid_file when set,
// prints an assistant text "hanging (pid P, child C)" and sleeps until
// killed; a test can wait for that event instead of sleeping. On SIGTERM the
// fake does what the real CLI does: an "[Request interrupted by user]" user
// message and an error_during_execution result (terminal_reason
// aborted_streaming), exit 143. With ignore_sigterm it ignores SIGTERM, so
// only SIGKILL ends it; with child_ignores_sigterm the child does (it is set
// up before the event is printed). The child keeps the fake's stdout and
// stderr open, so a reader sees EOF only once the whole group is gone.
//
// # Hooks
//
// --settings (a file or a JSON string) may hold hooks, run as the real CLI
// runs them for PreToolUse, PostToolUse, PostToolUseFailure, Stop and
// Notification; --include-hook-events prints them as system hook_started
// and hook_response events. Every tool step (write, edit, read, bash, tool)
// goes through them; see hooks.go.
//
// # Invocation log
//
// When FAKE_CLAUDE_LOG is set, every invocation appends one JSON line to
// that file before anything else, saying how it was run: its argv,
// directory, environment, stdin and user (pkg/fakeclaudelog, which tests
// read it with).
package main

import (
	"fmt"
	"os"
)

func main() {
	if os.Getenv(sleeperEnv) != "" {
		sleepForever()
	}
	logInvocation()
	os.Exit(run(os.Args[1:]))
}

// exitError is a failure with the exit status and the stderr text of the
// real CLI's (or, for what the fake does not do, its own clear message).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) *exitError {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// run is the whole CLI; it returns the exit status.
func run(args []string) int {
	o, err := parseArgs(args)
	if err == nil {
		err = o.validate()
	}
	if err != nil {
		return report(err)
	}
	switch {
	case o.help:
		fmt.Print(helpText)
		return 0
	case o.version:
		fmt.Println(version + " (Claude Code)")
		return 0
	}
	code, err := newTurn(o).run()
	if err != nil {
		return report(err)
	}
	return code
}

func report(err error) int {
	if e, ok := err.(*exitError); ok {
		fmt.Fprintln(os.Stderr, e.msg)
		return e.code
	}
	fmt.Fprintln(os.Stderr, "fake claude:", err)
	return 1
}

const version = "2.1.330"

const helpText = `Usage: claude [options] [command] [prompt]

FAKE Claude Code (a test double for mesh-exec; see its package doc).
Only headless runs (-p/--print) are implemented.
`
