package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

// maxOutput bounds the answer kept from stdout; an agent printing more is
// cut, keeping the start.
const maxOutput = 4 << 20

// textParser reads plain text output: every line is assistant text, all of
// stdout is the answer, and the exit code is the only verdict.
type textParser struct {
	classes   classifier
	sessionID string
	announced bool
	out       strings.Builder
	lines     int
}

func (p *textParser) Line(line []byte) []backend.Event {
	var events []backend.Event
	if !p.announced {
		// The session id is known before the agent says anything; the
		// first line is when the run visibly started.
		p.announced = true
		events = append(events, backend.Event{Kind: backend.KindInit, SessionID: p.sessionID})
	}
	if p.lines > 0 {
		p.write("\n")
	}
	p.lines++
	p.write(string(line))
	if len(bytes.TrimSpace(line)) > 0 {
		// The newline keeps lines apart where events are concatenated (the
		// runner's partial output on a timeout).
		events = append(events, backend.Event{Kind: backend.KindText, Text: string(line) + "\n"})
	}
	return events
}

func (p *textParser) write(s string) {
	if room := maxOutput - p.out.Len(); room > 0 {
		if len(s) > room {
			s = s[:room]
		}
		p.out.WriteString(s)
	}
}

func (p *textParser) Finish(exitCode int, stderr string) backend.Result {
	res := backend.Result{SessionID: p.sessionID, Output: strings.TrimRight(p.out.String(), "\r\n")}
	if exitCode == 0 {
		return res
	}
	res.IsError = true
	res.Output = cliout.FirstNonEmpty(cliout.StderrTail(stderr), tail(res.Output), fmt.Sprintf("the agent exited with code %d", exitCode))
	res.Err = p.classes.classify(res.Output, stderr)
	return res
}

// jsonlParser reads one JSON object per line through the configured field
// names.
type jsonlParser struct {
	fields    Fields
	classes   classifier
	tools     []string
	files     []string
	sessionID string
	announced bool
	text      strings.Builder
	ended     bool // a line carried the result field
	result    string
	failed    bool
	failure   string
}

func (p *jsonlParser) Line(line []byte) []backend.Event {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	var obj map[string]any
	if err := json.Unmarshal(line, &obj); err != nil {
		return nil
	}
	var events []backend.Event
	if id, ok := lookup(obj, p.fields.SessionID).(string); ok && id != "" && (!p.announced || id != p.sessionID) {
		p.sessionID, p.announced = id, true
		events = append(events, backend.Event{Kind: backend.KindInit, SessionID: id})
	}
	text, _ := lookup(obj, p.fields.Text).(string)
	if text != "" {
		if p.text.Len() < maxOutput {
			p.text.WriteString(text)
		}
		events = append(events, backend.Event{Kind: backend.KindText, Text: text})
	}
	if tool, _ := lookup(obj, p.fields.Tool).(string); tool != "" {
		p.tools = cliout.AppendDistinct(p.tools, tool)
		events = append(events, backend.Event{Kind: backend.KindToolUse, Tool: tool})
	}
	if file, _ := lookup(obj, p.fields.File).(string); file != "" && len(p.files) < 10000 {
		p.files = cliout.AppendDistinct(p.files, file)
	}
	isError, _ := lookup(obj, p.fields.IsError).(bool)
	result, hasResult := lookup(obj, p.fields.Result).(string)
	if isError {
		p.failed = true
		p.failure = cliout.FirstNonEmpty(result, text, p.failure)
	}
	if hasResult {
		p.ended, p.result = true, result
		events = append(events, backend.Event{Kind: backend.KindResult, SessionID: p.sessionID, Text: result, IsError: p.failed})
	} else if isError {
		events = append(events, backend.Event{Kind: backend.KindError, Text: cliout.FirstNonEmpty(text, "the agent reported an error"), IsError: true})
	}
	return events
}

// lookup follows a dotted path through nested objects; nil when absent.
func lookup(obj map[string]any, path string) any {
	var cur any = obj
	for _, key := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[key]
	}
	return cur
}

func (p *jsonlParser) Finish(exitCode int, stderr string) backend.Result {
	res := backend.Result{SessionID: p.sessionID, ToolsUsed: p.tools, FilesModified: p.files}
	switch {
	case p.failed:
		res.IsError = true
		res.Output = cliout.FirstNonEmpty(p.failure, cliout.StderrTail(stderr), fmt.Sprintf("the agent reported an error (exit code %d)", exitCode))
	case p.ended:
		// The agent's own verdict: a result line without is_error is a
		// success, whatever the exit code.
		res.Output = p.result
	case exitCode == 0:
		res.Output = p.text.String()
	default:
		res.IsError = true
		res.Output = cliout.FirstNonEmpty(cliout.StderrTail(stderr), tail(p.text.String()), fmt.Sprintf("the agent exited with code %d", exitCode))
	}
	if res.IsError {
		res.Err = p.classes.classify(res.Output, stderr)
	}
	return res
}

// classifier maps a failed run's messages to the errors callers branch on,
// with the patterns the operator configured.
type classifier struct {
	sessionNotFound, notLoggedIn *regexp.Regexp
}

func (c classifier) classify(output, stderr string) error {
	for _, s := range []string{output, stderr} {
		switch {
		case c.sessionNotFound != nil && c.sessionNotFound.MatchString(s):
			return backend.ErrSessionNotFound
		case c.notLoggedIn != nil && c.notLoggedIn.MatchString(s):
			return backend.ErrNotLoggedIn
		}
	}
	return nil
}

// tail is the last 4 KiB of s, from a line start when there is one.
func tail(s string) string {
	s = strings.TrimSpace(s)
	const maxBytes = 4 << 10
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = strings.ToValidUTF8(s, "")
	}
	return s
}
