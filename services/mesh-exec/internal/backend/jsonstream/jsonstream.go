// Package jsonstream is the mesh-exec backend for the agent CLIs that print
// a run as JSON Lines: Codex, Gemini CLI and OpenCode (see [CLIs]).
//
// What these CLIs have in common lives here once: the checks on a request
// (an empty task, a session id of the wrong shape), the reading of lines,
// the run's totals (tools used, files written, tokens, cost) and the result,
// with the explanation of a run that never ended and its error class. Each
// CLI is a [CLI] description: its flags, how it spells a model, a resume and
// the task, its event decoder, and the messages that classify its failures.
// A new CLI of this kind is one more description, a fixture stream, and a
// part for the fake agents (testdata/fakeagents) that the tests run. The
// command backend reads an operator's JSON Lines agent through the same
// parser ([NewParser]), with a description made from its configuration.
package jsonstream

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/cliout"
)

// CLI describes one agent CLI that prints its run as JSON Lines.
type CLI struct {
	// Name is the backend's name in worker definitions, and the default
	// executable, looked up in PATH.
	Name string
	// Flags come right after the executable, before the request's own.
	Flags []string
	// Model, Resume and Prompt spell the request's model, the session it
	// resumes and its task as arguments. Each value travels in one argument
	// (or after "--"), so that no value can be read as a flag.
	Model  func(model string) []string
	Resume func(session string) []string
	Prompt func(task string) []string
	// Session is the shape of the CLI's session ids, and SessionShape says
	// it in words ("a UUID"). mesh-exec only stores ids the CLI printed, so
	// anything else is refused, and with it a flag passed as a session id.
	Session      *regexp.Regexp
	SessionShape string
	// Check refuses what else the CLI cannot honour; nil checks nothing.
	Check func(req backend.Request) error
	// NewDecoder returns the reader of one run's events.
	NewDecoder func() Decoder
	// ExitCodeCounts makes a non-zero exit a failure even after the run's
	// own end (a CLI that reports failure only by its exit code).
	ExitCodeCounts bool
	// EndOptional makes a run that exits 0 without the CLI's end a
	// success, its answer what the run has so far (a CLI whose stream need
	// not end with a result).
	EndOptional bool
	// NoEnd explains a run that never ended, from its exit code, when the
	// CLI said nothing on stdout or stderr.
	NoEnd func(exitCode int) string
	// Rules classify a failed run, the first that matches.
	Rules []Rule
	// Classify, when set, classifies a failed run instead of Rules, from
	// the CLI's name for its error and the run's message and stderr.
	Classify func(errorName, message string) error
}

// Rule classifies a failed run by the CLI's own name for its error, or by
// a lower-case part of its message or stderr.
type Rule struct {
	ErrorName string
	Messages  []string
	Err       error
}

// Decoder reads one run's events into the run.
type Decoder interface {
	// Decode reads one line, a JSON object (which may not have the CLI's
	// shape at all), and returns the normalized events it makes. It must
	// never panic, and ignores what it does not know.
	Decode(r *Run, line []byte) []backend.Event
}

// Finisher is a Decoder that brings the run up to date once the output
// ended, before the result is made from it (an answer assembled from its
// parts only then, rather than at every line).
type Finisher interface {
	Finish(r *Run)
}

// Run is what a decoder has learned of a run so far; the result is made
// from it.
type Run struct {
	SessionID string
	// Answer is the agent's answer so far.
	Answer string
	// Ended is set when the CLI's own end of the run came (a completed
	// turn, a result event, a finished step).
	Ended bool
	// Failure, when set, is why the run failed, as the CLI said it.
	// Failed says the run failed when the CLI gave no reason.
	Failure string
	Failed  bool
	// LastError and Warning are the last error the CLI reported along the
	// way and its last notice: the explanations of a run that never ended.
	LastError, Warning string
	// ErrorName is the CLI's own name for its error, for [Rule.ErrorName].
	ErrorName string
	Turns     int
	// InputTokens, OutputTokens, DurationMS and CostUSD are as reported;
	// a CLI that reports no money leaves the cost at 0 (mesh-exec does not
	// guess at a price list).
	InputTokens, OutputTokens, DurationMS int64
	CostUSD                               float64
	tools, files                          []string
	// announced says the init event of SessionID was reported.
	announced bool
}

// NameSession records the session id the CLI named and returns the init
// event that reports it: the first time, and again only when the id
// changes. An empty id names nothing. Codex and Gemini CLI name the session
// in one event, OpenCode and an operator's agent on every line; all of them
// report it to mesh-exec once.
func (r *Run) NameSession(id string) []backend.Event {
	if id == "" || (r.announced && id == r.SessionID) {
		return nil
	}
	r.SessionID, r.announced = id, true
	return []backend.Event{{Kind: backend.KindInit, SessionID: id}}
}

// ReportError records an error the CLI reported along the way, not final by
// itself (the run may still end well), and returns its error event; the last
// one explains a run that never ended. An empty message is no error.
func (r *Run) ReportError(msg string) []backend.Event {
	if msg == "" {
		return nil
	}
	r.LastError = msg
	return []backend.Event{{Kind: backend.KindError, Text: msg, IsError: true}}
}

// Warn records a notice of the CLI (a warning, not an error), kept only as
// the explanation of last resort of a run that never ended.
func (r *Run) Warn(msg string) {
	if msg != "" {
		r.Warning = msg
	}
}

// maxListed bounds the distinct tools and files a run records: the
// agent's output is untrusted, and each record looks through the list.
const maxListed = 10000

// UsedTool records a tool the agent called.
func (r *Run) UsedTool(name string) {
	if len(r.tools) < maxListed {
		r.tools = cliout.AppendDistinct(r.tools, name)
	}
}

// Wrote records a file the agent wrote or edited.
func (r *Run) Wrote(path string) {
	if path != "" && len(r.files) < maxListed {
		r.files = cliout.AppendDistinct(r.files, path)
	}
}

// AddCost adds a step's reported cost, dropping nonsense.
func (r *Run) AddCost(usd float64) {
	if usd > 0 && usd < 1e6 {
		r.CostUSD += usd
	}
}

// ErrInvalidSessionID is returned for a session id that does not have its
// CLI's shape.
var ErrInvalidSessionID = fmt.Errorf("session id is not of the CLI's shape: %w", backend.ErrRequestRefused)

// Backend runs one CLI.
type Backend struct {
	cli    CLI
	binary string
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend for cli; binary is its executable, a name looked up
// in PATH or a path, and defaults to cli.Name.
func New(cli CLI, binary string) *Backend {
	if binary == "" {
		binary = cli.Name
	}
	return &Backend{cli: cli, binary: binary}
}

// Name returns the CLI's name.
func (b *Backend) Name() string { return b.cli.Name }

// Command returns the argv of a run.
func (b *Backend) Command(req backend.Request) ([]string, error) {
	c := b.cli
	if req.SessionID != "" && !c.Session.MatchString(req.SessionID) {
		return nil, fmt.Errorf("%s: %w: %q is not %s", c.Name, ErrInvalidSessionID, req.SessionID, c.SessionShape)
	}
	if strings.TrimSpace(req.Task) == "" {
		return nil, fmt.Errorf("%s: the task is empty", c.Name)
	}
	if c.Check != nil {
		if err := c.Check(req); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	argv := append([]string{b.binary}, c.Flags...)
	if req.Model != "" {
		argv = append(argv, c.Model(req.Model)...)
	}
	if req.SessionID != "" {
		argv = append(argv, c.Resume(req.SessionID)...)
	}
	return append(argv, c.Prompt(req.Task)...), nil
}

// NewParser returns a parser for one run's stdout.
func (b *Backend) NewParser(req backend.Request) backend.Parser {
	// A resumed run keeps its id even when the CLI fails before naming it.
	return NewParser(&b.cli, req.SessionID)
}

// NewParser returns a parser of one run of cli, whose session is sessionID
// until the CLI names one: the reading of lines and the result for a
// backend that builds its command lines itself (an operator's CLI).
func NewParser(cli *CLI, sessionID string) backend.Parser {
	return &parser{cli: cli, dec: cli.NewDecoder(), run: Run{SessionID: sessionID}}
}

type parser struct {
	cli *CLI
	dec Decoder
	run Run
}

// Line parses one line of the CLI's stdout: JSON objects go to the
// decoder, anything else (blank lines, noise) is skipped.
func (p *parser) Line(line []byte) []backend.Event {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil
	}
	return p.dec.Decode(&p.run, line)
}

// Finish returns the run's result.
func (p *parser) Finish(exitCode int, stderr string) backend.Result {
	r := &p.run
	if f, ok := p.dec.(Finisher); ok {
		f.Finish(r)
	}
	res := backend.Result{
		SessionID:     r.SessionID,
		CostUSD:       r.CostUSD,
		DurationMS:    r.DurationMS,
		NumTurns:      r.Turns,
		InputTokens:   r.InputTokens,
		OutputTokens:  r.OutputTokens,
		ToolsUsed:     r.tools,
		FilesModified: r.files,
	}
	switch {
	case r.Failure != "" || r.Failed:
		res.IsError = true
		res.Output = cliout.FirstNonEmpty(r.Failure, cliout.StderrTail(stderr), fmt.Sprintf("the agent reported an error (exit code %d)", exitCode))
	case r.Ended && (exitCode == 0 || !p.cli.ExitCodeCounts), !r.Ended && exitCode == 0 && p.cli.EndOptional:
		res.Output = r.Answer
		return res
	default:
		// No end, or a failing exit: the CLI stopped before or outside the
		// run (bad arguments, no credentials, an unknown session, a
		// crash). What it said is the best explanation.
		res.IsError = true
		res.Output = cliout.FirstNonEmpty(r.LastError, cliout.StderrTail(stderr), r.Warning, p.cli.NoEnd(exitCode))
	}
	res.Err = p.cli.classify(r.ErrorName, res.Output+"\n"+stderr)
	return res
}

// classify maps a failure to the errors callers branch on.
func (c *CLI) classify(name, msg string) error {
	if c.Classify != nil {
		return c.Classify(name, msg)
	}
	m := strings.ToLower(msg)
	for _, rule := range c.Rules {
		if rule.ErrorName != "" && rule.ErrorName == name {
			return rule.Err
		}
		for _, part := range rule.Messages {
			if strings.Contains(m, part) {
				return rule.Err
			}
		}
	}
	return nil
}

// CLIs are the descriptions of every CLI this backend serves.
func CLIs() []CLI { return []CLI{Codex(), OpenCode(), Gemini()} }

// uuidPattern is a UUID, the shape of Codex's and Gemini CLI's session ids.
var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// flagValue spells a value as --flag=value, one argument.
func flagValue(flag string) func(string) []string {
	return func(v string) []string { return []string{flag + "=" + v} }
}

// afterDashes puts the task after "--", where it cannot be a flag.
func afterDashes(task string) []string { return []string{"--", task} }
