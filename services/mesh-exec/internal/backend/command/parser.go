package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/jsonstream"
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
	res.Output = cliout.FirstNonEmpty(cliout.StderrTail(stderr), cliout.Tail(res.Output), fmt.Sprintf("the agent exited with code %d", exitCode))
	res.Err = p.classes.classify(res.Output, stderr)
	return res
}

// fieldDecoder reads one JSON object per line through the configured field
// names, for the JSON Lines reading of package jsonstream.
type fieldDecoder struct {
	fields Fields
	text   strings.Builder
	result string
}

func (d *fieldDecoder) Decode(r *jsonstream.Run, line []byte) []backend.Event {
	var obj map[string]any
	if err := json.Unmarshal(line, &obj); err != nil {
		return nil
	}
	id, _ := lookup(obj, d.fields.SessionID).(string)
	events := r.NameSession(id)
	text, _ := lookup(obj, d.fields.Text).(string)
	if text != "" {
		if d.text.Len() < maxOutput {
			d.text.WriteString(text)
		}
		events = append(events, backend.Event{Kind: backend.KindText, Text: text})
	}
	if tool, _ := lookup(obj, d.fields.Tool).(string); tool != "" {
		r.UsedTool(tool)
		events = append(events, backend.Event{Kind: backend.KindToolUse, Tool: tool})
	}
	if file, _ := lookup(obj, d.fields.File).(string); file != "" {
		r.Wrote(file)
	}
	isError, _ := lookup(obj, d.fields.IsError).(bool)
	result, hasResult := lookup(obj, d.fields.Result).(string)
	if isError {
		r.Failed = true
		r.Failure = cliout.FirstNonEmpty(result, text, r.Failure)
	}
	if hasResult {
		// The agent's own verdict: a result line without is_error is a
		// success, whatever the exit code.
		r.Ended, d.result = true, result
		events = append(events, backend.Event{Kind: backend.KindResult, SessionID: r.SessionID, Text: result, IsError: r.Failed})
	} else if isError {
		events = append(events, backend.Event{Kind: backend.KindError, Text: cliout.FirstNonEmpty(text, "the agent reported an error"), IsError: true})
	}
	return events
}

// Finish makes the answer: the result line's, else the text seen, which
// also explains a run that ended neither with a result nor with exit 0.
func (d *fieldDecoder) Finish(r *jsonstream.Run) {
	if r.Ended {
		r.Answer = d.result
		return
	}
	r.Answer = d.text.String()
	r.Warning = cliout.Tail(r.Answer)
}

// jsonlCLI is the JSON Lines reading of an operator's agent: the configured
// fields, no end required (exit 0 without a result line answers with the
// text seen), and the operator's patterns to classify failures.
func jsonlCLI(fields Fields, classes classifier) *jsonstream.CLI {
	return &jsonstream.CLI{
		Name:        "command",
		NewDecoder:  func() jsonstream.Decoder { return &fieldDecoder{fields: fields} },
		EndOptional: true,
		NoEnd:       func(exit int) string { return fmt.Sprintf("the agent exited with code %d", exit) },
		Classify:    func(_, message string) error { return classes.classify(message, "") },
	}
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
