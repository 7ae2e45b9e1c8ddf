// Package command is the mesh-exec backend for agent CLIs mesh-exec does not
// know: the operator describes the command line as a template and says how
// to read its output.
//
// # Command lines
//
// [Config.Argv] is the command of a new session, [Config.ResumeArgv] the
// command of a resumed one, for example
//
//	Argv:       ["my-agent", "--session-id", "{session_id}", "--prompt", "{task}"]
//	ResumeArgv: ["my-agent", "--resume", "{session_id}", "--prompt", "{task}"]
//
// The placeholders {task}, {session_id}, {repository} and {model} are
// replaced inside each argument, in one pass (a task containing
// "{session_id}" stays as written), and the argv is executed directly, never
// through a shell, so no value can become more than the one argument it is
// in. The first element, the executable, takes no placeholders: a request
// never chooses what runs. A value can still start with "-"; if the agent
// would read a task like "--help" as a flag, put its own end-of-flags marker
// ("--") before {task} or write the flag and value as one argument
// ("--prompt={task}").
//
// {model} is empty when the request names no model. An argument that
// contains it is then left out; when that argument is a value (it does not
// start with "-") and the one before it a bare flag ("-m", "--model": starts
// with "-", has no "=" and no placeholder), the flag goes too, so
// ["--model", "{model}"] disappears as a pair and ["--model={model}"] alone.
//
// # Sessions
//
// An empty ResumeArgv means the agent cannot resume: a request with a session
// id is refused with [ErrResumeUnsupported]. Session ids must match
// [Config.SessionIDPattern] (by default letters, digits, ".", "_" and "-",
// not starting with "-"), so a stored id can never smuggle in a flag.
//
// Every new run gets a session id: the one the agent reports (jsonl output
// with a session id field), or else one mesh-exec generates, a random UUID,
// which {session_id} in Argv passes to the agent. An agent that takes its
// session id from the command line therefore needs no output format at all.
// An agent that ignores it still gets an id, which mesh-exec uses to route a
// later call to the same repository; whether that call continues a
// conversation is up to ResumeArgv.
//
// # Output
//
// [Config.Output] "text" (the default) takes the whole stdout as the answer,
// each line also being a text event as it arrives; the exit code decides
// success, and a failure reports stderr's tail. "jsonl" reads one JSON
// object per line and looks up the fields named in [Config.Fields] (dotted
// paths reach into nested objects): the session id, assistant text, the
// final result, an is-error flag, a tool name and a modified file. A line
// with the result field ends the run, its is-error flag deciding success;
// without such a line the exit code decides, and the answer is the text
// seen.
//
// The agent's error messages are its own; [Config.SessionNotFoundPattern]
// and [Config.NotLoggedInPattern] say which ones mean "no such session" and
// "not logged in", so callers can branch on them as for known CLIs.
package command

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/jsonstream"
)

// Config configures the command backend.
type Config struct {
	// Argv is the command line of a new session, a template (see the package
	// documentation). Required.
	Argv []string
	// ResumeArgv is the command line of a resumed session, a template that
	// normally uses {session_id}. Defaults to none: resuming is refused.
	ResumeArgv []string
	// Output is how stdout is read: "text" or "jsonl". Defaults to "text".
	Output string
	// Fields names the JSON fields of jsonl output. Each defaults to its
	// snake_case name: session_id, text, result, is_error, tool, file.
	Fields Fields
	// SessionIDPattern is the regular expression a session id to resume must
	// match in full. Defaults to ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, which
	// covers UUIDs and most CLIs' ids and never starts with "-".
	SessionIDPattern string
	// SessionNotFoundPattern is a regular expression that, found in a failed
	// run's output or stderr, classifies the failure as
	// backend.ErrSessionNotFound ("no such session"). Defaults to none.
	SessionNotFoundPattern string
	// NotLoggedInPattern likewise classifies a failure as
	// backend.ErrNotLoggedIn. Defaults to none.
	NotLoggedInPattern string
}

// Fields names the fields of a jsonl line, each a key or a dotted path
// ("message.content"). A line may carry any of them.
type Fields struct {
	SessionID string // a string: the agent's session id
	Text      string // a string: assistant text, reported as it arrives
	Result    string // a string: the final answer; its line ends the run
	IsError   string // a boolean: true when the run (or this line) failed
	Tool      string // a string: the name of a tool the agent called
	File      string // a string: a path the agent wrote or edited
}

// Errors of a misconfigured or refused run.
var (
	// ErrResumeUnsupported is returned when the request names a session but
	// the agent has no ResumeArgv.
	ErrResumeUnsupported = fmt.Errorf("command: this agent cannot resume sessions (no ResumeArgv configured): %w", backend.ErrRequestRefused)
	// ErrInvalidSessionID is returned for a session id that does not match
	// SessionIDPattern.
	ErrInvalidSessionID = fmt.Errorf("command: invalid session id: %w", backend.ErrRequestRefused)
	// ErrInvalidConfig is returned by every Command of a backend whose
	// Config is unusable.
	ErrInvalidConfig = errors.New("command: invalid configuration")
)

const defaultSessionIDPattern = `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`

// Backend runs a configured agent CLI.
type Backend struct {
	cfg       Config
	sessionRe *regexp.Regexp
	cfgErr    error
	classes   classifier
}

var _ backend.Backend = (*Backend)(nil)

// New returns a command backend. A Config it cannot use is reported by every
// Command call, with what is wrong.
func New(cfg Config) *Backend {
	b := &Backend{cfg: cfg}
	if b.cfg.Output == "" {
		b.cfg.Output = "text"
	}
	f := &b.cfg.Fields
	f.SessionID = orDefault(f.SessionID, "session_id")
	f.Text = orDefault(f.Text, "text")
	f.Result = orDefault(f.Result, "result")
	f.IsError = orDefault(f.IsError, "is_error")
	f.Tool = orDefault(f.Tool, "tool")
	f.File = orDefault(f.File, "file")
	pattern := orDefault(b.cfg.SessionIDPattern, defaultSessionIDPattern)
	var errs []error
	re, err := regexp.Compile(pattern)
	if err != nil {
		errs = append(errs, fmt.Errorf("SessionIDPattern: %w", err))
	}
	b.sessionRe = re
	if b.cfg.SessionNotFoundPattern != "" {
		if b.classes.sessionNotFound, err = regexp.Compile(b.cfg.SessionNotFoundPattern); err != nil {
			errs = append(errs, fmt.Errorf("SessionNotFoundPattern: %w", err))
		}
	}
	if b.cfg.NotLoggedInPattern != "" {
		if b.classes.notLoggedIn, err = regexp.Compile(b.cfg.NotLoggedInPattern); err != nil {
			errs = append(errs, fmt.Errorf("NotLoggedInPattern: %w", err))
		}
	}
	if b.cfg.Output != "text" && b.cfg.Output != "jsonl" {
		errs = append(errs, fmt.Errorf("field Output: %q is neither \"text\" nor \"jsonl\"", b.cfg.Output))
	}
	errs = append(errs, checkTemplate("Argv", b.cfg.Argv, true))
	if len(b.cfg.ResumeArgv) > 0 {
		errs = append(errs, checkTemplate("ResumeArgv", b.cfg.ResumeArgv, false))
	}
	if err := errors.Join(errs...); err != nil {
		b.cfgErr = fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return b
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func checkTemplate(name string, argv []string, required bool) error {
	if len(argv) == 0 {
		if required {
			return fmt.Errorf("%s is empty", name)
		}
		return nil
	}
	if strings.TrimSpace(argv[0]) == "" {
		return fmt.Errorf("%s[0], the executable, is empty", name)
	}
	if strings.ContainsAny(argv[0], "{}") && placeholder.MatchString(argv[0]) {
		return fmt.Errorf("%s[0], the executable, may not contain a placeholder", name)
	}
	return nil
}

var placeholder = regexp.MustCompile(`\{(task|session_id|repository|model)\}`)

// Name returns "command".
func (b *Backend) Name() string { return "command" }

// Err reports what is wrong with the Config, if anything, so a server can
// refuse to start rather than fail every call.
func (b *Backend) Err() error { return b.cfgErr }

// Command returns the argv of a run.
func (b *Backend) Command(req backend.Request) ([]string, error) {
	if b.cfgErr != nil {
		return nil, b.cfgErr
	}
	if req.SessionID != "" {
		if len(b.cfg.ResumeArgv) == 0 {
			return nil, fmt.Errorf("%w; start a new session instead of resuming %q", ErrResumeUnsupported, req.SessionID)
		}
		if !b.sessionRe.MatchString(req.SessionID) {
			return nil, fmt.Errorf("%w: %q does not match %s", ErrInvalidSessionID, req.SessionID, b.sessionRe)
		}
		return expand(b.cfg.ResumeArgv, req, req.SessionID), nil
	}
	return expand(b.cfg.Argv, req, newSessionID(req)), nil
}

// expand fills a template for one request.
func expand(tmpl []string, req backend.Request, sessionID string) []string {
	r := strings.NewReplacer(
		"{task}", req.Task,
		"{session_id}", sessionID,
		"{repository}", req.Repository,
		"{model}", req.Model,
	)
	argv := []string{tmpl[0]}
	for i, arg := range tmpl[1:] {
		if req.Model == "" && strings.Contains(arg, "{model}") {
			// A value argument ("{model}", not "--model={model}") goes
			// with the flag before it.
			if prev := tmpl[i]; i > 0 && !strings.HasPrefix(arg, "-") && isBareFlag(prev) {
				argv = argv[:len(argv)-1]
			}
			continue
		}
		argv = append(argv, r.Replace(arg))
	}
	return argv
}

func isBareFlag(arg string) bool {
	return strings.HasPrefix(arg, "-") && !strings.Contains(arg, "=") && !placeholder.MatchString(arg)
}

// NewParser returns a parser for one run's stdout.
func (b *Backend) NewParser(req backend.Request) backend.Parser {
	id := req.SessionID
	if id == "" {
		id = newSessionID(req)
	}
	if b.cfg.Output == "jsonl" {
		return jsonstream.NewParser(jsonlCLI(b.cfg.Fields, b.classes), id)
	}
	return &textParser{classes: b.classes, sessionID: id}
}

// newSessionID is a new run's session id: the one the runner gave it. A
// caller that gives none (a test calling Command alone) gets a fresh one.
func newSessionID(req backend.Request) string {
	if req.NewSessionID != "" {
		return req.NewSessionID
	}
	return uuid.NewString()
}
