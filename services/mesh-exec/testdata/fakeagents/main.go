// Command fakeagents stands in for the Codex, OpenCode and Gemini CLIs, and
// for a user's own agent, in mesh-exec's tests. It lives under testdata so
// `go build ./...` never builds it and nothing ships it; tests build it with
//
//	go build -o DIR/codex github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents
//
// It plays the CLI named by its executable's base name (codex, opencode,
// gemini; anything else is the plain "command" agent) or by a first argument
// --as=NAME. It parses the flags the real CLI would, refusing unknown ones
// the way the real one does, so a backend that builds a wrong argv fails its
// tests, and prints that CLI's headless output format, as the backends'
// parsers read it (see their parser.go for the sources).
//
// What a run does comes from a script, a JSON file named by $FAKEAGENT_SCRIPT
// (package script has the format):
//
//	{"runs": [
//	  {"task": "say hi", "steps": [{"reply": "hi"}]},
//	  {"task": "edit", "steps": [{"edit": {"path": "notes.txt", "content": "x"}}, {"reply": "done"}]},
//	  {"task": "break", "steps": [{"fail": "the model is down"}]},
//	  {"steps": [{"unknown": true}, {"recall": true}]}
//	]}
//
// The first run whose task equals the prompt plays, else the first without a
// task. Steps: reply (assistant text), edit (write a file under the working
// directory and report the edit), command (report a shell command and its
// output), unknown (an event type the CLI does not have yet, and a line that
// is not JSON), recall (reply with the previous prompt of the session, to
// show a resume continued it), stderr (write to stderr), fail (the CLI's
// error, exit code 1). A run may set exit_code.
//
// Sessions are files in $FAKEAGENT_SESSIONS (default:
// ~/.fakeagents/sessions, so a test's HOME scopes them), one per CLI and id,
// holding the prompts so far; resuming an id that is not there fails the way
// the real CLI does. Every invocation's argv is appended, one JSON array per
// line, to $FAKEAGENT_ARGV_LOG when set.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshwork/meshwork/services/mesh-exec/testdata/fakeagents/script"
)

// The script types the CLIs play, shared with the tests that write scripts.
type (
	Run  = script.Run
	Edit = script.Edit
)

// invocation is what the argv asked for, whichever CLI parsed it.
type invocation struct {
	prompt  string
	resume  string // session id to resume
	session string // session id to create (command agent)
	model   string
	jsonl   bool // command agent: print JSON lines
}

// usageError is a refused argv: exit code 2, as clap and yargs do.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// cliError is a message the real CLI prints as it is (capitalized, with a
// full stop) before exiting with 1.
type cliError string

func (e cliError) Error() string { return string(e) }

func main() {
	os.Exit(run(os.Args))
}

func run(args []string) int {
	logArgv(args)
	name := filepath.Base(args[0])
	rest := args[1:]
	if len(rest) > 0 && strings.HasPrefix(rest[0], "--as=") {
		name, rest = strings.TrimPrefix(rest[0], "--as="), rest[1:]
	}
	var agent cli
	switch name {
	case "codex":
		agent = &codex{}
	case "opencode":
		agent = &opencode{}
	case "gemini":
		agent = &gemini{}
	default:
		agent = &plain{}
	}
	inv, err := agent.parse(rest)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		var usage usageError
		if errors.As(err, &usage) {
			return 2
		}
		return 1
	}
	sc, err := loadScript()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakeagents: %v\n", err)
		return 1
	}
	store := sessionStore{dir: sessionsDir(), cli: agent.name()}
	var sess *session
	switch {
	case inv.resume != "":
		sess, err = store.load(inv.resume)
		if err != nil {
			return agent.noSession(inv.resume)
		}
	default:
		id := inv.session
		if id == "" {
			id = agent.newID()
		}
		sess = &session{ID: id}
	}
	r := sc.Pick(inv.prompt)
	code := agent.play(sess, inv, r)
	sess.Prompts = append(sess.Prompts, inv.prompt)
	if err := store.save(sess); err != nil {
		fmt.Fprintf(os.Stderr, "fakeagents: %v\n", err)
		return 1
	}
	if r.ExitCode != 0 {
		return r.ExitCode
	}
	return code
}

// cli is one CLI's flags and output format.
type cli interface {
	name() string
	parse(args []string) (invocation, error)
	newID() string
	// noSession fails a resume of an unknown id the way the CLI does.
	noSession(id string) int
	// play runs the steps, printing the CLI's events; it returns the exit code.
	play(s *session, inv invocation, r Run) int
}

func loadScript() (*script.Script, error) {
	path := os.Getenv("FAKEAGENT_SCRIPT")
	if path == "" {
		return nil, errors.New("FAKEAGENT_SCRIPT is not set")
	}
	return script.Load(path)
}

// sessionsDir is where sessions live: $FAKEAGENT_SESSIONS, or under $HOME
// as the real CLIs keep theirs, so that a test's HOME scopes them.
func sessionsDir() string {
	if d := os.Getenv("FAKEAGENT_SESSIONS"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".fakeagents", "sessions")
}

func logArgv(args []string) {
	path := os.Getenv("FAKEAGENT_ARGV_LOG")
	if path == "" {
		return
	}
	line, _ := json.Marshal(args)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.Write(append(line, '\n'))
}

// session is one conversation, kept between invocations.
type session struct {
	ID      string   `json:"id"`
	Prompts []string `json:"prompts"`
}

// reply is the text of a reply step: its own, or for a recall step the
// session's previous prompt.
func (s *session) reply(st script.Step) string {
	if st.Recall {
		return s.previous()
	}
	return st.Reply
}

// previous is what a recall step replies.
func (s *session) previous() string {
	if len(s.Prompts) == 0 {
		return "no previous prompt"
	}
	return "previous prompt: " + s.Prompts[len(s.Prompts)-1]
}

type sessionStore struct {
	dir string
	cli string
}

func (st sessionStore) path(id string) string {
	return filepath.Join(st.dir, st.cli, filepath.Base(id)+".json")
}

func (st sessionStore) load(id string) (*session, error) {
	data, err := os.ReadFile(st.path(id))
	if err != nil {
		return nil, err
	}
	var s session
	return &s, json.Unmarshal(data, &s)
}

func (st sessionStore) save(s *session) error {
	if err := os.MkdirAll(filepath.Join(st.dir, st.cli), 0o700); err != nil {
		return err
	}
	data, _ := json.Marshal(s)
	tmp := st.path(s.ID) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, st.path(s.ID))
}

// edit performs an edit step in the working directory.
func edit(e *Edit) error {
	if e.Path == "" || filepath.IsAbs(e.Path) || strings.HasPrefix(filepath.Clean(e.Path), "..") {
		return fmt.Errorf("edit path %q must be relative and inside the repository", e.Path)
	}
	if err := os.MkdirAll(filepath.Dir(e.Path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(e.Path, []byte(e.Content), 0o644)
}

// emit prints one JSON line to stdout.
func emit(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // the fake's own values: a bug here is a bug in the test
	}
	fmt.Printf("%s\n", data)
}

type obj = map[string]any

func now() int64 { return time.Now().UnixMilli() }

// options is how a fake CLI reads its arguments, as the real one's parser
// does: a switch takes no value, a value option takes one (as "--opt v" or
// "--opt=v"), "--" ends the options, and other words are operands.
type options struct {
	// switches are the options without a value; a nil func accepts one and
	// does nothing.
	switches map[string]func()
	// values are the options with a value, by every name they go by; a
	// nil func accepts one and ignores its value.
	values map[string]func(v string) error
	// unknown is the error for an option neither table names.
	unknown func(arg string) error
	// dashIsOperand takes a lone "-" for an operand (clap's parser does),
	// not for an unknown option (yargs and commander's).
	dashIsOperand bool
}

// scan reads args, and returns the operands, and how many of them came
// before a "--" (all of them without one).
func (o options) scan(args []string) (words []string, beforeDashes int, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			beforeDashes = len(words)
			return append(words, args[i+1:]...), beforeDashes, nil
		}
		if f, ok := o.switches[a]; ok {
			if f != nil {
				f()
			}
			continue
		}
		name, v, inline := strings.Cut(a, "=")
		if setValue, ok := o.values[name]; ok && strings.HasPrefix(a, "-") {
			if !inline {
				if i+1 >= len(args) {
					return nil, 0, usageError{fmt.Sprintf("a value is required for '%s' but none was supplied", name)}
				}
				i++
				v = args[i]
			}
			if setValue != nil {
				if err := setValue(v); err != nil {
					return nil, 0, err
				}
			}
			continue
		}
		if strings.HasPrefix(a, "-") && (a != "-" || !o.dashIsOperand) {
			return nil, 0, o.unknown(a)
		}
		words = append(words, a)
	}
	return words, len(words), nil
}

// set is a value option that stores its value in p.
func set(p *string) func(string) error {
	return func(v string) error {
		*p = v
		return nil
	}
}
