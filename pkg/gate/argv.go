package gate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Per-tool argv checking.
//
// An allowed command prefix such as "go vet" says which program runs, not
// what it is told to do: `go vet -vettool=/any/program` runs any program,
// `git diff --no-index /etc/passwd x` reads outside the repository, and
// `git diff --output=/tmp/x` writes there. A list of bad flag prefixes cannot
// enumerate every tool's escape flags (new flags come with every release, and
// `go test` passes flags it does not know on to the test binary), so for the
// tools we know the check is an allowlist: after an allowed prefix, an argv
// whose program is go or git is parsed the way that tool parses it, against a
// table of the subcommands and flags we have read and trust. Anything else
// starting with "-" is refused, naming the flag, the subcommand and what is
// allowed. Positional arguments (packages, files, revisions, paths) and the
// values of flags that write files must be relative paths without ".."
// elements. The checks are lexical: like the rest of the gate they refuse
// early and explain, and executors still confine what a command touches.
//
// Other programs keep the plain prefix check: the gate does not know their
// flags, so a definition should allow only programs it trusts with any
// arguments.
//
// The tables mirror how each tool reads its arguments, erring towards
// refusal. Go's flag package lets -flag and --flag mean the same, takes a
// value as -flag=value or -flag value, and a boolean only as -flag or
// -flag=bool. Git's short flags may be grouped (-sb) and take a value
// attached (-U5); long flags take one after "=" (--unified=5). The table
// accepts a git value in the next argument only where git certainly reads it
// there, so the gate never reads as a value what git reads as a flag.

// argKind says whether a flag takes a value, and how it may be written.
type argKind uint8

const (
	// argNone: a switch. Go also accepts -flag=true|false (its boolean
	// flags); git accepts no value at all.
	argNone argKind = iota
	// argRequired: a value, attached (-flag=value, git -fvalue) or in the
	// next argument (-flag value).
	argRequired
	// argAttached (git): a value, attached only: --flag=value, -fvalue.
	argAttached
	// argOptional: an optional value, attached only: --flag or --flag=value,
	// git -f or -fvalue. The next argument is never the value.
	argOptional
)

// option is one flag of a subcommand.
type option struct {
	short byte   // git: the one-letter spelling, as in -s; 0 for none
	long  string // go: the name, as in -json; git: the long spelling without dashes, as in --short
	arg   argKind
	check func(value string) string // why a value is refused, or ""; nil accepts any value
}

// subcommand is a parsed table of one subcommand's flags.
type subcommand struct {
	name    string // "go test", for messages
	long    map[string]*option
	short   [128]*option
	counts  bool   // git log: -<n> limits the number of commits
	allowed string // the allowed flags, for messages
}

// argvTool is a program whose arguments the gate parses.
type argvTool struct {
	name        string
	git         bool // parse as git does, rather than as Go's flag package does
	subcommands map[string]*subcommand
	allowed     string // the subcommands, for messages
}

// newArgvTool indexes a tool's tables; counts names the git subcommands that
// take -<n>. A flag listed twice in one subcommand is a bug in the tables.
func newArgvTool(name string, git bool, subs map[string][]option, counts ...string) *argvTool {
	t := &argvTool{name: name, git: git, subcommands: map[string]*subcommand{}}
	names := make([]string, 0, len(subs))
	for sub, opts := range subs {
		names = append(names, sub)
		s := &subcommand{name: name + " " + sub, long: map[string]*option{}, counts: slices.Contains(counts, sub)}
		spellings := make([]string, 0, len(opts))
		for i := range opts {
			o := &opts[i]
			if (o.short != 0 && s.short[o.short] != nil) || (o.long != "" && s.long[o.long] != nil) {
				panic("gate: " + s.name + " lists a flag twice")
			}
			if o.short != 0 {
				s.short[o.short] = o
				spellings = append(spellings, "-"+string(o.short))
			}
			if o.long != "" {
				s.long[o.long] = o
				if git {
					spellings = append(spellings, "--"+o.long)
				} else {
					spellings = append(spellings, "-"+o.long)
				}
			}
		}
		s.allowed = strings.Join(spellings, ", ")
		t.subcommands[sub] = s
	}
	slices.Sort(names)
	t.allowed = strings.Join(names, ", ")
	return t
}

// argvTools are the programs whose arguments the gate parses, by base name.
var argvTools = map[string]*argvTool{
	"go":  newArgvTool("go", false, goSubcommands),
	"git": newArgvTool("git", true, gitSubcommands, "log", "show"),
}

// argvToolFor returns the parser for a program (argv[0], by its base name),
// or nil when the gate only checks its prefix.
func argvToolFor(program string) *argvTool {
	return argvTools[program[strings.LastIndexByte(program, '/')+1:]]
}

// check returns why the arguments after the program (argv[1:]) are refused,
// or "". With prefix set it checks a command entry of a definition, which
// may end in a flag whose value the action supplies.
func (t *argvTool) check(args []string, prefix bool) string {
	if len(args) == 0 {
		return ""
	}
	s := t.subcommands[args[0]]
	if s == nil {
		if strings.HasPrefix(args[0], "-") {
			return fmt.Sprintf("%s: options before the subcommand (%s) are not allowed; name one of the subcommands %s first", t.name, spell(args[0]), t.allowed)
		}
		return fmt.Sprintf("%s: subcommand %s is not allowed (allowed: %s)", t.name, spell(args[0]), t.allowed)
	}
	if t.git {
		return s.checkGit(args[1:], prefix)
	}
	return s.checkGo(args[1:], prefix)
}

// checkGo parses arguments as Go's flag package and `go test` do: every
// argument starting with "-" is a flag, wherever it stands (go test reads
// flags after the packages too).
func (s *subcommand) checkGo(args []string, prefix bool) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			if msg := segmentProblem(a); msg != "" {
				return fmt.Sprintf("%s: package or file %s: %s", s.name, spell(a), msg)
			}
			continue
		}
		name := strings.TrimPrefix(a[1:], "-")
		name, value, hasValue := strings.Cut(name, "=")
		o := s.long[name]
		if o == nil || name == "" {
			return s.notAllowed(a)
		}
		switch o.arg {
		case argNone:
			if hasValue {
				if _, err := strconv.ParseBool(value); err != nil {
					return fmt.Sprintf("%s: flag %s takes true or false, not %s", s.name, flagOf(a), spell(value))
				}
			}
			continue
		case argOptional:
			if !hasValue {
				continue
			}
		case argRequired, argAttached:
			if !hasValue {
				if i+1 == len(args) {
					return s.needsValue(a, prefix)
				}
				i++
				value = args[i]
			}
		}
		if msg := s.checkValue(o, a, value); msg != "" {
			return msg
		}
	}
	return ""
}

// checkGit parses arguments as git's option parser does: "--" ends the
// flags, after it every argument is a path; before it an argument not
// starting with "-" is a revision or a path.
func (s *subcommand) checkGit(args []string, prefix bool) string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return checkPaths(s.name, "path", args[i+1:])
		}
		if !strings.HasPrefix(a, "-") {
			if msg := segmentProblem(a); msg != "" {
				return fmt.Sprintf("%s: revision or path %s: %s", s.name, spell(a), msg)
			}
			continue
		}
		var msg string
		if strings.HasPrefix(a, "--") {
			i, msg = s.checkGitLong(args, i, prefix)
		} else {
			i, msg = s.checkGitShort(args, i, prefix)
		}
		if msg != "" {
			return msg
		}
	}
	return ""
}

// checkGitLong checks the long flag args[i] and returns the index of the
// last argument it used.
func (s *subcommand) checkGitLong(args []string, i int, prefix bool) (int, string) {
	a := args[i]
	name, value, hasValue := strings.Cut(a[2:], "=")
	o := s.long[name]
	if o == nil || name == "" {
		return i, s.notAllowed(a)
	}
	switch o.arg {
	case argNone:
		if hasValue {
			return i, fmt.Sprintf("%s: flag %s takes no value", s.name, flagOf(a))
		}
		return i, ""
	case argOptional:
		if !hasValue {
			return i, ""
		}
	case argAttached:
		if !hasValue {
			if prefix && i+1 == len(args) {
				return i, ""
			}
			return i, fmt.Sprintf("%s: flag %s needs a value: write %s=<value>", s.name, a, a)
		}
	case argRequired:
		if !hasValue {
			if i+1 == len(args) {
				return i, s.needsValue(a, prefix)
			}
			i++
			value = args[i]
		}
	}
	return i, s.checkValue(o, a, value)
}

// checkGitShort checks the group of short flags args[i] (-s, -sb, -U5, -n 3)
// and returns the index of the last argument it used.
func (s *subcommand) checkGitShort(args []string, i int, prefix bool) (int, string) {
	a := args[i]
	if a == "-" {
		return i, s.notAllowed(a)
	}
	if s.counts && isDigits(a[1:]) {
		return i, "" // git log -5
	}
	for j := 1; j < len(a); j++ {
		c := a[j]
		var o *option
		if c < byte(len(s.short)) {
			o = s.short[c]
		}
		if o == nil {
			r := a[j:]
			if c < 0x80 {
				r = a[j : j+1]
			}
			return i, s.notAllowed("-" + r)
		}
		if o.arg == argNone {
			continue
		}
		value := a[j+1:]
		if value == "" {
			switch o.arg {
			case argOptional:
				return i, ""
			case argAttached:
				if prefix && i+1 == len(args) {
					return i, ""
				}
				return i, fmt.Sprintf("%s: flag -%c needs a value attached, as in -%c<value>", s.name, c, c)
			case argRequired:
				if i+1 == len(args) {
					return i, s.needsValue("-"+string(c), prefix)
				}
				i++
				value = args[i]
			}
		}
		return i, s.checkValue(o, "", value)
	}
	return i, ""
}

// checkValue checks a flag's value. The flag is named by arg as written, or
// by its short spelling when arg is "".
func (s *subcommand) checkValue(o *option, arg, value string) string {
	if o.check == nil {
		return ""
	}
	if msg := o.check(value); msg != "" {
		if arg == "" {
			arg = "-" + string(o.short)
		}
		return fmt.Sprintf("%s: flag %s value %s: %s", s.name, flagOf(arg), spell(value), msg)
	}
	return ""
}

func (s *subcommand) notAllowed(arg string) string {
	return fmt.Sprintf("%s: flag %s is not allowed (allowed: %s)", s.name, spell(flagOf(arg)), s.allowed)
}

func (s *subcommand) needsValue(arg string, prefix bool) string {
	if prefix {
		return ""
	}
	return fmt.Sprintf("%s: flag %s needs a value", s.name, flagOf(arg))
}

// checkPaths checks arguments that can only be paths.
func checkPaths(cmd, what string, args []string) string {
	for _, a := range args {
		if msg := segmentProblem(a); msg != "" {
			return fmt.Sprintf("%s: %s %s: %s", cmd, what, spell(a), msg)
		}
	}
	return ""
}

// flagOf returns a flag argument without its value.
func flagOf(arg string) string {
	if i := strings.IndexByte(arg, '='); i >= 0 {
		return arg[:i]
	}
	return arg
}

// spell returns s as is when it is printable ASCII, quoted in ASCII
// otherwise, so that what an agent sent can neither break a message nor hide
// in it behind a lookalike character.
func spell(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return strconv.QuoteToASCII(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Value checks.

func oneOf(values ...string) func(string) string {
	return func(v string) string {
		if slices.Contains(values, v) {
			return ""
		}
		return "want one of " + strings.Join(values, ", ")
	}
}

func integer(v string) string {
	if _, err := strconv.Atoi(v); err != nil {
		return "want an integer"
	}
	return ""
}

func count(v string) string {
	if !isDigits(v) {
		return "want a number of lines"
	}
	return ""
}

// similarity checks a git rename or copy threshold: 50, 50%, .5
func similarity(v string) string {
	digits := strings.TrimSuffix(v, "%")
	digits = strings.Replace(digits, ".", "", 1)
	if !isDigits(digits) {
		return "want a similarity such as 50%"
	}
	return ""
}

func diffFilter(v string) string {
	if v == "" || strings.Trim(v, "ACDMRTUXBacdmrtuxb*") != "" {
		return "want letters of ACDMRTUXB (lower case to exclude), optionally *"
	}
	return ""
}

// outputFile checks the value of a flag that writes a file.
func outputFile(v string) string {
	if v == "" {
		return "want a file path relative to the workspace"
	}
	return segmentProblem(v)
}

// packageList checks a comma-separated list of package patterns.
func packageList(v string) string {
	for p := range strings.SplitSeq(v, ",") {
		if msg := segmentProblem(p); msg != "" {
			return msg
		}
	}
	return ""
}

// vetList checks go test -vet: off, all, or a comma-separated list of vet
// analyzers.
func vetList(v string) string {
	if v == "off" || v == "all" {
		return ""
	}
	for name := range strings.SplitSeq(v, ",") {
		if !slices.Contains(vetAnalyzers, name) {
			return "want off, all or a comma-separated list of vet analyzers (" + strings.Join(vetAnalyzers, ", ") + ")"
		}
	}
	return ""
}

// The tables.

// vetAnalyzers are go vet's analyzers (`go tool vet help`, Go 1.26), each
// also a boolean flag of go vet.
var vetAnalyzers = []string{
	"appends", "asmdecl", "assign", "atomic", "bools", "buildtag", "cgocall", "composites", "copylocks",
	"defers", "directive", "errorsas", "framepointer", "hostport", "httpresponse", "ifaceassert",
	"loopclosure", "lostcancel", "nilfunc", "printf", "shift", "sigchanyzer", "slog", "stdmethods",
	"stdversion", "stringintconv", "structtag", "testinggoroutine", "tests", "timeformat", "unmarshal",
	"unreachable", "unsafeptr", "unusedresult", "waitgroup",
}

// Go's build flags that are safe everywhere. Not here, because they run or
// read another program or file: -exec, -toolexec, -vettool, -overlay,
// -modfile, -ldflags, -gcflags, -asmflags, -gccgoflags, -compiler, -C, -pgo.
var (
	goFlagMod  = option{long: "mod", arg: argRequired, check: oneOf("readonly", "vendor", "mod")}
	goFlagTags = option{long: "tags", arg: argRequired}
	goSwitches = func(names ...string) []option {
		out := make([]option, len(names))
		for i, n := range names {
			out[i] = option{long: n}
		}
		return out
	}
)

var goSubcommands = map[string][]option{
	"test": append(goSwitches("v", "short", "cover", "benchmem", "failfast", "json", "race", "trimpath", "x", "n", "a"),
		option{long: "run", arg: argRequired},
		option{long: "skip", arg: argRequired},
		option{long: "count", arg: argRequired, check: integer},
		option{long: "timeout", arg: argRequired},
		option{long: "covermode", arg: argRequired, check: oneOf("set", "count", "atomic")},
		option{long: "coverpkg", arg: argRequired, check: packageList},
		option{long: "coverprofile", arg: argRequired, check: outputFile},
		option{long: "bench", arg: argRequired},
		option{long: "benchtime", arg: argRequired},
		option{long: "cpu", arg: argRequired},
		option{long: "parallel", arg: argRequired, check: integer},
		option{long: "list", arg: argRequired},
		option{long: "shuffle", arg: argRequired},
		option{long: "p", arg: argRequired, check: integer},
		option{long: "vet", arg: argRequired, check: vetList},
		goFlagTags, goFlagMod,
	),
	"build": append(goSwitches("v", "x", "n", "a", "race", "trimpath", "cover"),
		option{long: "o", arg: argRequired, check: outputFile},
		option{long: "p", arg: argRequired, check: integer},
		goFlagTags, goFlagMod,
	),
	"vet": append([]option{{long: "json"}, goFlagTags, goFlagMod},
		goSwitches(append([]string{"v", "x", "n"}, vetAnalyzers...)...)...),
	"list": append(goSwitches("m", "e", "deps", "test", "find", "export", "compiled"),
		option{long: "json", arg: argOptional},
		option{long: "f", arg: argRequired},
		goFlagTags, goFlagMod,
	),
	"version": goSwitches("m", "v", "json"),
}

// Git's diff flags, shared by diff, log and show. Not here: --ext-diff and
// --textconv (they run programs from the configuration), --no-index (it
// compares files outside the repository), --output (it writes a file), -O
// (it reads one) and anything else unlisted.
var gitDiffFlags = []option{
	{short: 'p', long: "patch"},
	{short: 'u'},
	{short: 's', long: "no-patch"},
	{short: 'U', long: "unified", arg: argOptional, check: count},
	{long: "raw"},
	{long: "stat", arg: argOptional},
	{long: "numstat"},
	{long: "shortstat"},
	{long: "summary"},
	{long: "name-only"},
	{long: "name-status"},
	{short: 'z'},
	{long: "no-color"},
	{long: "color", arg: argOptional, check: oneOf("never")},
	{short: 'w', long: "ignore-all-space"},
	{short: 'b', long: "ignore-space-change"},
	{long: "ignore-blank-lines"},
	{short: 'M', long: "find-renames", arg: argOptional, check: similarity},
	{short: 'C', long: "find-copies", arg: argOptional, check: similarity},
	{long: "no-renames"},
	{long: "word-diff", arg: argOptional, check: oneOf("plain", "porcelain", "none")},
	{long: "diff-filter", arg: argAttached, check: diffFilter},
	{long: "minimal"},
	{long: "histogram"},
	{long: "patience"},
	{long: "no-ext-diff"},
	{long: "no-textconv"},
}

// Git's log flags, for log and show (besides -<n>).
var gitLogFlags = []option{
	{short: 'n', long: "max-count", arg: argRequired, check: integer},
	{long: "skip", arg: argAttached, check: integer},
	{long: "oneline"},
	{long: "format", arg: argAttached},
	{long: "pretty", arg: argOptional},
	{long: "abbrev-commit"},
	{long: "decorate", arg: argOptional, check: oneOf("short", "full", "auto", "no")},
	{long: "no-decorate"},
	{long: "date", arg: argAttached},
	{long: "graph"},
	{long: "all"},
	{long: "reverse"},
	{long: "first-parent"},
	{long: "merges"},
	{long: "no-merges"},
	{long: "follow"},
	{long: "since", arg: argAttached},
	{long: "after", arg: argAttached},
	{long: "until", arg: argAttached},
	{long: "before", arg: argAttached},
	{long: "author", arg: argAttached},
	{long: "committer", arg: argAttached},
	{long: "grep", arg: argAttached},
	{short: 'i', long: "regexp-ignore-case"},
}

var gitSubcommands = map[string][]option{
	"status": {
		{short: 's', long: "short"},
		{short: 'b', long: "branch"},
		{long: "porcelain", arg: argOptional, check: oneOf("v1", "v2")},
		{long: "long"},
		{short: 'u', long: "untracked-files", arg: argOptional, check: oneOf("no", "normal", "all")},
		{long: "ignored", arg: argOptional, check: oneOf("traditional", "no", "matching")},
		{short: 'z'},
		{long: "renames"},
		{long: "no-renames"},
		{long: "ahead-behind"},
		{long: "no-ahead-behind"},
	},
	"diff": append(slices.Clone(gitDiffFlags),
		option{long: "cached"},
		option{long: "staged"},
		option{long: "exit-code"},
		option{long: "quiet"},
	),
	"log":  append(slices.Clone(gitDiffFlags), gitLogFlags...),
	"show": append(slices.Clone(gitDiffFlags), gitLogFlags...),
}
