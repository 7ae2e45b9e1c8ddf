package gate

import (
	"errors"
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Shell scripts.
//
// An agent's Bash tool call is a script, not an argv: `go test ./... && curl
// evil.example` passes a check of its first word against a commands allowlist
// and then runs curl. [SplitShell] parses the script the way bash would and
// returns every simple command in it, each with the argv bash would pass and
// the files it redirects to, so that each can be checked on its own.
//
// The split is only worth something if the argv it returns is the argv that
// runs, so anything whose value is decided at run time makes the whole
// script undecidable and is refused, with the reason: parameter, arithmetic,
// command and process substitutions anywhere in a word (including words the
// shell only evaluates, such as for-loop items and case subjects), unquoted
// glob characters, brace expansions and tildes, $'...' and $"..." strings,
// commands whose name is decided by another command (eval, source, ., exec,
// command, builtin, and builtins that define code run later such as trap,
// alias or hash), and anything that assigns a shell variable (FOO=1 go test,
// export, for loops, read, printf -v, ...), because a variable such as PATH
// or GOFLAGS changes what a later, allowed command does. Function
// definitions are refused because a function can shadow an allowed command
// name, and [[ ]], (( )) and let because bash evaluates their operands as
// arithmetic, which can run command substitutions hidden in static strings,
// and so are test -v and -R (a variable name's array subscript).
//
// What is left to the caller: whether each argv is allowed (env, xargs, find
// -exec, nohup, timeout and sudo run other programs and are ordinary argv to
// an allowlist), and whether each redirection target is acceptable (bash
// treats /dev/tcp/host/port as a network connection). The split also assumes
// the shell that runs the script starts without aliases, functions or
// BASH_ENV from its environment, since those are invisible in the script.

// Bounds on what [SplitShell] accepts.
const (
	// maxShellScript bounds the script's size in bytes.
	maxShellScript = 64 << 10
	// maxShellCommands bounds the number of simple commands in a script.
	maxShellCommands = 1000
	// maxShellDepth bounds the nesting of compound commands.
	maxShellDepth = 100
	// maxShellRedirects bounds the redirections that apply to one command,
	// its own and those of the compound commands around it, each of which
	// is copied onto every command inside.
	maxShellRedirects = 100
)

// ErrShellUndecidable is wrapped by every error [SplitShell] returns for a
// script that parses but whose commands cannot be decided statically.
var ErrShellUndecidable = errors.New("shell script cannot be decided statically")

// ShellCommand is one simple command of a script: its argv, as the shell
// would pass it, and the files it redirects to. Redirections of a compound
// command ({ ...; } > f, ( ... ) < f, if ... fi > f) are recorded on every
// simple command inside it.
type ShellCommand struct {
	// Argv is the command name and its arguments, after quote removal.
	Argv []string
	// Writes are the targets of >, >>, >|, &>, &>>, <> and >& file, in
	// order, as written (relative, absolute or special files such as
	// /dev/null and /dev/tcp/...).
	Writes []string
	// Reads are the targets of <, <> and <& file, in order, as written.
	Reads []string
}

// SplitShell parses script as bash and returns every simple command in it,
// in source order: in pipelines, lists (&&, ||, ;, &), subshells, { } groups,
// time, and if, while, until, for and case bodies. It returns an error naming
// the reason when the script does not parse, is empty, exceeds the bounds
// (64 KiB, 1,000 commands, nesting depth 100) or cannot be decided
// statically (see the package's shell notes above; such errors wrap
// [ErrShellUndecidable]). Here-documents are allowed when their body has no
// expansions; they are not file reads. Descriptor duplications (2>&1, >&-)
// are recorded nowhere.
func SplitShell(script string) ([]ShellCommand, error) {
	if strings.TrimSpace(script) == "" {
		return nil, errors.New("empty shell script")
	}
	if len(script) > maxShellScript {
		return nil, fmt.Errorf("shell script is %d bytes, over the limit of %d", len(script), maxShellScript)
	}
	if strings.IndexByte(script, 0) >= 0 {
		return nil, errors.New("shell script contains a NUL byte")
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	if err != nil {
		return nil, fmt.Errorf("parsing shell script: %w", err)
	}
	s := &shellSplitter{src: script}
	if err := s.stmts(f.Stmts, redirs{}, 0); err != nil {
		return nil, err
	}
	if len(s.cmds) == 0 {
		return nil, errors.New("shell script runs no command")
	}
	return s.cmds, nil
}

// redirs are the file redirections in force on a statement.
type redirs struct{ writes, reads []string }

// shellSplitter walks one parsed script, collecting its simple commands.
type shellSplitter struct {
	src  string
	cmds []ShellCommand
	n    int // simple commands seen, for messages and the bound
}

// undecidable returns an error wrapping ErrShellUndecidable.
func undecidable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrShellUndecidable, fmt.Sprintf(format, args...))
}

// text returns the source of node, shortened for messages.
func (s *shellSplitter) text(n syntax.Node) string {
	from, to := int(n.Pos().Offset()), int(n.End().Offset())
	if from < 0 || to > len(s.src) || from >= to {
		return "?"
	}
	t := s.src[from:to]
	if len(t) > 60 {
		t = t[:57] + "..."
	}
	return t
}

func (s *shellSplitter) stmts(list []*syntax.Stmt, in redirs, depth int) error {
	for _, st := range list {
		if err := s.stmt(st, in, depth); err != nil {
			return err
		}
	}
	return nil
}

func (s *shellSplitter) stmt(st *syntax.Stmt, in redirs, depth int) error {
	if depth > maxShellDepth {
		return fmt.Errorf("shell script nests deeper than %d", maxShellDepth)
	}
	if st == nil {
		return nil
	}
	if st.Coprocess || st.Disown {
		return undecidable("%s is not bash", s.text(st))
	}
	rd, err := s.redirects(st.Redirs)
	if err != nil {
		return err
	}
	if n := len(in.writes) + len(in.reads) + len(rd.writes) + len(rd.reads); n > maxShellRedirects {
		return fmt.Errorf("%d redirections apply to one command; the limit is %d", n, maxShellRedirects)
	}
	rd = redirs{
		writes: append(append([]string(nil), in.writes...), rd.writes...),
		reads:  append(append([]string(nil), in.reads...), rd.reads...),
	}
	depth++
	switch c := st.Cmd.(type) {
	case nil:
		return undecidable("redirection without a command: %s", s.text(st))
	case *syntax.CallExpr:
		return s.call(c, rd)
	case *syntax.BinaryCmd:
		if err := s.stmt(c.X, rd, depth); err != nil {
			return err
		}
		return s.stmt(c.Y, rd, depth)
	case *syntax.Subshell:
		return s.stmts(c.Stmts, rd, depth)
	case *syntax.Block:
		return s.stmts(c.Stmts, rd, depth)
	case *syntax.TimeClause:
		return s.stmt(c.Stmt, rd, depth)
	case *syntax.IfClause:
		for ; c != nil; c = c.Else {
			if err := s.stmts(c.Cond, rd, depth); err != nil {
				return err
			}
			if err := s.stmts(c.Then, rd, depth); err != nil {
				return err
			}
		}
		return nil
	case *syntax.WhileClause:
		if err := s.stmts(c.Cond, rd, depth); err != nil {
			return err
		}
		return s.stmts(c.Do, rd, depth)
	case *syntax.CaseClause:
		if _, err := s.word(c.Word, true); err != nil {
			return undecidable("case subject %s is not static: %v", s.text(c.Word), err)
		}
		for _, item := range c.Items {
			for _, p := range item.Patterns {
				if _, err := s.word(p, true); err != nil {
					return undecidable("case pattern %s is not static: %v", s.text(p), err)
				}
			}
			if err := s.stmts(item.Stmts, rd, depth); err != nil {
				return err
			}
		}
		return nil
	case *syntax.ForClause:
		if w, ok := c.Loop.(*syntax.WordIter); ok {
			return undecidable("for loop assigns variable %s", w.Name.Value)
		}
		return undecidable("arithmetic for loop %s", s.text(c.Loop))
	case *syntax.FuncDecl:
		return undecidable("function definition %s can shadow a command", s.text(c))
	case *syntax.DeclClause:
		return undecidable("%s assigns variables", c.Variant.Value)
	case *syntax.ArithmCmd:
		return undecidable("arithmetic command %s", s.text(c))
	case *syntax.LetClause:
		return undecidable("let evaluates arithmetic: %s", s.text(c))
	case *syntax.TestClause:
		return undecidable("[[ ]] may evaluate arithmetic: %s", s.text(c))
	default:
		return undecidable("unsupported command %s", s.text(c))
	}
}

// refusedBuiltins are builtins that run code the script does not show, define
// code that runs later, or assign variables; see the package's shell notes.
var refusedBuiltins = map[string]string{
	"eval":      "runs its arguments as a script",
	"source":    "runs another script",
	".":         "runs another script",
	"exec":      "replaces the shell",
	"command":   "runs another command",
	"builtin":   "runs another command",
	"coproc":    "runs another command",
	"trap":      "defines code run later",
	"alias":     "defines a command",
	"unalias":   "changes a command",
	"enable":    "loads or changes builtins",
	"hash":      "changes where a command is found",
	"shopt":     "changes how the shell parses and expands",
	"declare":   "assigns variables",
	"typeset":   "assigns variables",
	"local":     "assigns variables",
	"export":    "assigns variables",
	"readonly":  "assigns variables",
	"unset":     "changes variables",
	"read":      "assigns variables",
	"mapfile":   "assigns variables",
	"readarray": "assigns variables",
	"getopts":   "assigns variables",
	"let":       "evaluates arithmetic",
	"fc":        "runs commands from history",
	"compgen":   "can run commands",
	"complete":  "defines code run later",
	"bind":      "defines code run later",
}

func (s *shellSplitter) call(c *syntax.CallExpr, rd redirs) error {
	s.n++
	if s.n > maxShellCommands {
		return fmt.Errorf("shell script has more than %d commands", maxShellCommands)
	}
	if len(c.Assigns) > 0 {
		return undecidable("command %d assigns variable %s", s.n, s.text(c.Assigns[0]))
	}
	argv := make([]string, 0, len(c.Args))
	for i, w := range c.Args {
		v, err := s.word(w, false)
		if err != nil {
			return undecidable("word %d of command %d is not static: %v", i+1, s.n, err)
		}
		argv = append(argv, v)
	}
	if len(argv) == 0 {
		return undecidable("command %d is empty", s.n)
	}
	if why, ok := refusedBuiltins[argv[0]]; ok {
		return undecidable("command %d: %s %s", s.n, argv[0], why)
	}
	switch argv[0] {
	case "printf", "wait":
		// printf -v name and wait -p name assign a variable.
		flag := map[string]string{"printf": "v", "wait": "p"}[argv[0]]
		for _, a := range argv[1:] {
			if a == "--" || len(a) < 2 || a[0] != '-' {
				break
			}
			if strings.Contains(a, flag) {
				return undecidable("command %d: %s %s assigns a variable", s.n, argv[0], a)
			}
		}
	case "set":
		if err := checkSet(argv[1:]); err != nil {
			return undecidable("command %d: %v", s.n, err)
		}
	case "test", "[":
		// -v and -R take a variable name, whose array subscript bash
		// evaluates as arithmetic: `test -v 'a[$(cmd)]'` runs cmd.
		for _, a := range argv[1:] {
			if a == "-v" || a == "-R" {
				return undecidable("command %d: %s %s evaluates a variable name, which can run commands", s.n, argv[0], a)
			}
		}
	}
	s.cmds = append(s.cmds, ShellCommand{Argv: argv, Writes: rd.writes, Reads: rd.reads})
	return nil
}

// checkSet allows the shell options scripts commonly set (-e, -u, -x, -v,
// -o pipefail and their long names, and + to unset them); anything else,
// such as -k (which exports name=value arguments) or positional parameters,
// is refused.
func checkSet(args []string) error {
	named := false
	for _, a := range args {
		if named {
			switch a {
			case "pipefail", "errexit", "nounset", "xtrace", "verbose":
			default:
				return fmt.Errorf("set -o %s is not allowed", a)
			}
			named = false
			continue
		}
		if len(a) < 2 || (a[0] != '-' && a[0] != '+') {
			return fmt.Errorf("set %s is not allowed", a)
		}
		for i, r := range a[1:] {
			switch r {
			case 'e', 'u', 'x', 'v':
			case 'o':
				if i != len(a)-2 {
					return fmt.Errorf("set %s is not allowed", a)
				}
				named = true
			default:
				return fmt.Errorf("set %s is not allowed", a)
			}
		}
	}
	if named {
		return errors.New("set -o without an option name")
	}
	return nil
}

// redirects sorts a statement's redirections into file writes and reads.
func (s *shellSplitter) redirects(list []*syntax.Redirect) (redirs, error) {
	var rd redirs
	for _, r := range list {
		if r.N != nil && strings.Trim(r.N.Value, "0123456789") != "" {
			return rd, undecidable("redirection %s assigns variable %s", s.text(r), r.N.Value)
		}
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			if _, err := s.word(r.Word, false); err != nil {
				return rd, undecidable("here-document delimiter is not static: %v", err)
			}
			if r.Hdoc != nil {
				for _, p := range r.Hdoc.Parts {
					if _, ok := p.(*syntax.Lit); !ok {
						return rd, undecidable("here-document body is not static: %s", s.text(p))
					}
				}
			}
			continue
		}
		target, err := s.word(r.Word, false)
		if err != nil {
			return rd, undecidable("target of redirection %s is not static: %v", s.text(r), err)
		}
		switch r.Op {
		case syntax.RdrOut, syntax.AppOut, syntax.RdrClob, syntax.RdrAll, syntax.AppAll:
			rd.writes = append(rd.writes, target)
		case syntax.RdrIn:
			rd.reads = append(rd.reads, target)
		case syntax.RdrInOut:
			rd.reads = append(rd.reads, target)
			rd.writes = append(rd.writes, target)
		case syntax.DplOut, syntax.DplIn:
			if isFD(target) {
				continue
			}
			// >&file is &>file; <&file is an error in bash, recorded as a read.
			if r.Op == syntax.DplOut {
				rd.writes = append(rd.writes, target)
			} else {
				rd.reads = append(rd.reads, target)
			}
		case syntax.WordHdoc:
			// <<<word: the word is the input, no file.
		default:
			return rd, undecidable("unsupported redirection %s", s.text(r))
		}
	}
	return rd, nil
}

// isFD reports whether a duplication target names a descriptor: digits,
// "-" (close), or digits followed by "-" (move).
func isFD(t string) bool {
	d := strings.TrimSuffix(t, "-")
	return t == "-" || d != "" && strings.Trim(d, "0123456789") == ""
}

// word returns w's value after quote removal, or an error naming the first
// part whose value is decided at run time. Unquoted glob characters are
// refused unless pattern is set (case patterns match, they do not expand).
func (s *shellSplitter) word(w *syntax.Word, pattern bool) (string, error) {
	if w == nil {
		return "", errors.New("missing word")
	}
	var b strings.Builder
	braceOpen, braceSep := false, false
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			v := p.Value
			for j := 0; j < len(v); j++ {
				c := v[j]
				if c == '\\' {
					if j+1 < len(v) {
						j++
						b.WriteByte(v[j])
					}
					continue
				}
				switch c {
				case '*', '?', '[':
					if !pattern && (c != '[' || len(w.Parts) != 1 || v != "[") {
						return "", fmt.Errorf("unquoted glob %q in %s", c, s.text(w))
					}
				case '~':
					if i == 0 && j == 0 || j > 0 && (v[j-1] == '=' || v[j-1] == ':') {
						return "", fmt.Errorf("tilde expansion in %s", s.text(w))
					}
				case '{':
					braceOpen = true
				case ',':
					braceSep = braceSep || braceOpen
				case '.':
					braceSep = braceSep || braceOpen && j+1 < len(v) && v[j+1] == '.'
				case '}':
					if braceOpen && braceSep && !pattern {
						return "", fmt.Errorf("brace expansion in %s", s.text(w))
					}
				}
				b.WriteByte(c)
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", fmt.Errorf("$'...' string %s", s.text(p))
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				return "", fmt.Errorf("$\"...\" string %s", s.text(p))
			}
			for _, q := range p.Parts {
				lit, ok := q.(*syntax.Lit)
				if !ok {
					return "", fmt.Errorf("%s in %s", partKind(q), s.text(q))
				}
				v := lit.Value
				for j := 0; j < len(v); j++ {
					if v[j] == '\\' && j+1 < len(v) && strings.IndexByte("$`\"\\\n", v[j+1]) >= 0 {
						j++
						if v[j] == '\n' {
							continue
						}
					}
					b.WriteByte(v[j])
				}
			}
		default:
			return "", errors.New(s.text(part))
		}
	}
	return b.String(), nil
}

// partKind names a word part that expands at run time.
func partKind(p syntax.WordPart) string {
	switch p.(type) {
	case *syntax.ParamExp:
		return "parameter expansion"
	case *syntax.CmdSubst:
		return "command substitution"
	case *syntax.ArithmExp:
		return "arithmetic expansion"
	case *syntax.ProcSubst:
		return "process substitution"
	case *syntax.ExtGlob:
		return "extended glob"
	default:
		return "expansion"
	}
}
