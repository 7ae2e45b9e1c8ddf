package claude

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// noConversationRE is the CLI's message for --resume of a session it does
// not have, printed both in the result's errors and on stderr
// (testdata/claude-code-2.1.330/resume-unknown-session.*).
var noConversationRE = regexp.MustCompile(`No conversation found with session ID: (\S+)`)

// maxStderr bounds how much of stderr a crash message quotes.
const maxStderr = 2 << 10

// outcome decides whether the run failed, what its output is and how a
// failure is classified. Success is the result event's is_error alone: the
// CLI reports some failures with subtype "success" (not logged in, API
// errors; testdata/claude-code-2.1.330/print-json-not-logged-in.json), and a
// non-zero exit with is_error false does not happen.
func (p *parser) outcome(exitCode int, stderr string) (output string, isError bool, class error) {
	r := p.result
	if r == nil {
		if m := noConversationRE.FindStringSubmatch(stderr); m != nil {
			return sessionNotFound(m[1], m[0]), true, backend.ErrSessionNotFound
		}
		msg := fmt.Sprintf("claude exited with code %d without a result", exitCode)
		if s := lastBytes(strings.TrimSpace(stderr), maxStderr); s != "" {
			msg += "; stderr:\n" + s
		} else {
			msg += " and wrote nothing to stderr"
		}
		return msg, true, nil
	}
	if !r.IsError {
		return r.Result, false, nil
	}
	text := resultText(*r)
	if m := noConversationRE.FindStringSubmatch(text + "\n" + stderr); m != nil {
		return sessionNotFound(m[1], m[0]), true, backend.ErrSessionNotFound
	}
	if p.apiError == "authentication_failed" || strings.Contains(text, "Not logged in") {
		return fmt.Sprintf("Claude Code is not logged in (it said %q). Set ANTHROPIC_API_KEY, or CLAUDE_CODE_OAUTH_TOKEN (made by `claude setup-token`), in mesh-exec's environment; mesh-exec passes it on to claude.", text),
			true, backend.ErrNotLoggedIn
	}
	if text == "" {
		text = fmt.Sprintf("claude failed (%s) with exit code %d", r.Subtype, exitCode)
		if s := lastBytes(strings.TrimSpace(stderr), maxStderr); s != "" {
			text += "; stderr:\n" + s
		}
	}
	return text, true, nil
}

// resultText is what a result event says: its result, or its errors.
func resultText(ev event) string {
	if ev.Result != "" {
		return ev.Result
	}
	return strings.Join(stringList(ev.Errors), "; ")
}

func sessionNotFound(id, said string) string {
	return fmt.Sprintf("Claude Code has no session %s (it said %q): the session is unknown to the agent, for instance because the agent's home directory was reset. Start a new session by calling again without a session id.", id, said)
}

// lastBytes returns at most the last n bytes of s, cut on a rune boundary.
func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "…" + s[cut:]
}
