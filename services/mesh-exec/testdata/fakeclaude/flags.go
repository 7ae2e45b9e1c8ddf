package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// optKind is how an option takes its value, as in commander, the real CLI's
// argument parser.
type optKind int

const (
	boolOpt     optKind = iota // --verbose
	valueOpt                   // --model <model>: the next argument, whatever it looks like
	optionalOpt                // --resume [value]: the next argument unless it looks like an option
	variadicOpt                // --allowedTools <tools...>: arguments up to the next option
)

type optSpec struct {
	names   []string
	kind    optKind
	usage   string   // as commander prints it in errors: "--model <model>"
	choices []string // allowed values, when limited
}

// specs are the implemented options.
var specs = []optSpec{
	{names: []string{"-p", "--print"}, kind: boolOpt},
	{names: []string{"--verbose"}, kind: boolOpt},
	{names: []string{"--output-format"}, kind: valueOpt, usage: "--output-format <format>", choices: []string{"text", "json", "stream-json"}},
	{names: []string{"-r", "--resume"}, kind: optionalOpt},
	{names: []string{"-c", "--continue"}, kind: boolOpt},
	{names: []string{"--fork-session"}, kind: boolOpt},
	{names: []string{"--session-id"}, kind: valueOpt, usage: "--session-id <uuid>"},
	{names: []string{"--model"}, kind: valueOpt, usage: "--model <model>"},
	{names: []string{"--max-turns"}, kind: valueOpt, usage: "--max-turns <turns>"},
	{names: []string{"--allowedTools", "--allowed-tools"}, kind: variadicOpt, usage: "--allowedTools, --allowed-tools <tools...>"},
	{names: []string{"--disallowedTools", "--disallowed-tools"}, kind: variadicOpt, usage: "--disallowedTools, --disallowed-tools <tools...>"},
	{names: []string{"--tools"}, kind: variadicOpt, usage: "--tools <tools...>"},
	{names: []string{"--append-system-prompt"}, kind: valueOpt, usage: "--append-system-prompt <prompt>"},
	{names: []string{"--system-prompt"}, kind: valueOpt, usage: "--system-prompt <prompt>"},
	{names: []string{"--mcp-config"}, kind: variadicOpt, usage: "--mcp-config <configs...>"},
	{names: []string{"--strict-mcp-config"}, kind: boolOpt},
	{names: []string{"--permission-mode"}, kind: valueOpt, usage: "--permission-mode <mode>", choices: []string{"acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan"}},
	{names: []string{"--dangerously-skip-permissions"}, kind: boolOpt},
	{names: []string{"--no-session-persistence"}, kind: boolOpt},
	{names: []string{"--add-dir"}, kind: variadicOpt, usage: "--add-dir <directories...>"},
	{names: []string{"--settings"}, kind: valueOpt, usage: "--settings <file-or-json>"},
	{names: []string{"--include-hook-events"}, kind: boolOpt},
	{names: []string{"--setting-sources"}, kind: valueOpt, usage: "--setting-sources <sources>"},
	{names: []string{"-v", "--version"}, kind: boolOpt},
	{names: []string{"-h", "--help"}, kind: boolOpt},
}

// notImplemented are the real CLI's other options (help.txt of 2.1.330):
// refused with a message that says so, not as unknown.
var notImplemented = []string{
	"--agent", "--agents", "--allow-dangerously-skip-permissions", "--autocompact",
	"--ax-screen-reader", "--bg", "--background", "--bare", "--betas", "--brief", "--chrome",
	"--cloud", "-d", "--debug", "--debug-file", "--desktop", "--disable-slash-commands",
	"--effort", "--environment", "--exclude-dynamic-system-prompt-sections", "--fallback-model",
	"--file", "--forward-subagent-text", "--from-pr", "--ide",
	"--include-partial-messages", "--input-format", "--json-schema", "--max-budget-usd",
	"-n", "--name", "--no-chrome", "--permission-prompts", "--plugin-dir", "--plugin-url",
	"--prompt-suggestions", "--remote-control", "--remote-control-session-name-prefix",
	"--replay-user-messages", "--restricted", "--safe-mode",
	"--system-prompt-snapshot", "--teleport", "--tmux", "-w", "--worktree",
}

// subcommands are the real CLI's commands; a first positional argument
// naming one would run it, which the fake does not do.
var subcommands = []string{
	"agents", "attach", "auth", "auto-mode", "doctor", "gateway", "help", "import", "install",
	"kill", "logs", "mcp", "plugin", "plugins", "purge", "respawn", "rm", "setup-token", "stop",
	"ultrareview", "update", "upgrade",
}

// options is a parsed command line.
type options struct {
	print, verbose, cont, fork, strictMCP, noPersist, help, version bool
	includeHookEvents                                               bool
	settings                                                        []string // --settings values, in order
	outputFormat                                                    string
	resume                                                          *string // set when --resume was given, maybe ""
	sessionID, model, appendSystemPrompt, systemPrompt              string
	permissionMode                                                  string
	maxTurns                                                        int
	allowedTools, disallowedTools, tools, mcpConfigs, addDirs       []string
	prompt                                                          string
	hasPrompt                                                       bool
}

// switchFor is the field of an option that takes no value and only turns
// something on, named by its long name; nil for other options.
func (o *options) switchFor(name string) *bool {
	return map[string]*bool{
		"--print": &o.print, "--verbose": &o.verbose, "--continue": &o.cont, "--fork-session": &o.fork,
		"--strict-mcp-config": &o.strictMCP, "--no-session-persistence": &o.noPersist,
		"--include-hook-events": &o.includeHookEvents, "--help": &o.help, "--version": &o.version,
	}[name]
}

// list is the value list of a variadic option, named by its long name.
func (o *options) list(name string) *[]string {
	return map[string]*[]string{
		"--allowed-tools": &o.allowedTools, "--disallowed-tools": &o.disallowedTools,
		"--tools": &o.tools, "--mcp-config": &o.mcpConfigs, "--add-dir": &o.addDirs,
	}[name]
}

// jsonValue is the JSON an option such as --settings or --mcp-config names:
// the CLI takes either the JSON itself, a value that starts with "{", or the
// path of a file that holds it.
func jsonValue(v string) ([]byte, error) {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		return []byte(v), nil
	}
	return os.ReadFile(v)
}

// looksLikeOption is commander's test: "-" followed by anything.
func looksLikeOption(arg string) bool { return len(arg) > 1 && arg[0] == '-' }

func findSpec(name string) *optSpec {
	for i := range specs {
		if slices.Contains(specs[i].names, name) {
			return &specs[i]
		}
	}
	return nil
}

// parseArgs parses args the way commander does for the options above.
func parseArgs(args []string) (*options, error) {
	o := &options{outputFormat: "text"}
	var operands []string
	var variadic *[]string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			operands = append(operands, args[i+1:]...)
			break
		}
		if variadic != nil && !looksLikeOption(arg) {
			*variadic = append(*variadic, arg)
			continue
		}
		variadic = nil
		if !looksLikeOption(arg) {
			operands = append(operands, arg)
			continue
		}
		name, value, inline := arg, "", false
		if strings.HasPrefix(arg, "--") {
			name, value, inline = strings.Cut(arg, "=")
		}
		spec := findSpec(name)
		if spec == nil {
			if slices.Contains(notImplemented, name) {
				return nil, fail(1, "fake claude: option %s is not implemented", name)
			}
			return nil, fail(1, "error: unknown option '%s'", arg)
		}
		if spec.kind == boolOpt && inline {
			return nil, fail(1, "error: unknown option '%s'", arg)
		}
		// The value of an option that takes one.
		if (spec.kind == valueOpt || spec.kind == variadicOpt) && !inline {
			if i+1 >= len(args) {
				return nil, fail(1, "error: option '%s' argument missing", spec.usage)
			}
			i++
			value = args[i]
		}
		if spec.kind == optionalOpt && !inline && i+1 < len(args) && !looksLikeOption(args[i+1]) {
			i++
			value = args[i]
		}
		if len(spec.choices) > 0 && !slices.Contains(spec.choices, value) {
			return nil, fail(1, "error: option '%s' argument '%s' is invalid. Allowed choices are %s.", spec.usage, value, strings.Join(spec.choices, ", "))
		}
		long := spec.names[len(spec.names)-1]
		if b := o.switchFor(long); b != nil {
			*b = true
			continue
		}
		switch long {
		case "--dangerously-skip-permissions":
			o.permissionMode = "bypassPermissions"
		case "--settings":
			o.settings = append(o.settings, value)
		case "--setting-sources":
			// The fake loads no settings files, so only the value is checked.
			for _, src := range strings.Split(value, ",") {
				if !slices.Contains([]string{"user", "project", "local"}, strings.TrimSpace(src)) {
					return nil, fail(1, "Error: Invalid setting source: %s. Valid options are: user, project, local", src)
				}
			}
		case "--output-format":
			o.outputFormat = value
		case "--resume":
			o.resume = &value
		case "--session-id":
			o.sessionID = value
		case "--model":
			o.model = value
		case "--max-turns":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return nil, fail(1, "Error: --max-turns must be a positive integer, got %q", value)
			}
			o.maxTurns = n
		case "--append-system-prompt":
			o.appendSystemPrompt = value
		case "--system-prompt":
			o.systemPrompt = value
		case "--permission-mode":
			o.permissionMode = value
		case "--allowed-tools", "--disallowed-tools", "--tools", "--mcp-config", "--add-dir":
			variadic = o.list(long)
			*variadic = append(*variadic, value)
		}
	}
	if len(operands) > 1 {
		return nil, fail(1, "error: too many arguments. Expected 1 argument but got %d.", len(operands))
	}
	if len(operands) == 1 {
		if slices.Contains(subcommands, operands[0]) {
			return nil, fail(1, "fake claude: the %q subcommand is not implemented (a task that names a subcommand runs it in the real CLI)", operands[0])
		}
		o.prompt, o.hasPrompt = operands[0], true
	}
	return o, nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// validate applies the CLI's rules between options, with its messages, and
// reads the prompt from stdin when there is no prompt argument.
func (o *options) validate() error {
	if o.help || o.version {
		return nil
	}
	if !o.print {
		return fail(1, "fake claude: interactive mode is not implemented; use -p/--print")
	}
	if o.outputFormat == "stream-json" && !o.verbose {
		return fail(1, "Error: When using --print, --output-format=stream-json requires --verbose")
	}
	if o.sessionID != "" {
		if (o.cont || o.resume != nil) && !o.fork {
			return fail(1, "Error: --session-id can only be used with --continue or --resume if --fork-session is also specified.")
		}
		if !uuidRE.MatchString(o.sessionID) {
			return fail(1, "Error: Invalid session ID. Must be a valid UUID.")
		}
	}
	if o.resume != nil && *o.resume == "" {
		return fail(1, "fake claude: --resume without a session ID opens a picker, which needs an interactive terminal")
	}
	if o.fork && o.resume == nil && !o.cont {
		return fail(1, "Error: --fork-session can only be used with --resume or --continue")
	}
	if !o.hasPrompt {
		b, err := io.ReadAll(io.LimitReader(io.MultiReader(bytes.NewReader(stdinPeeked), os.Stdin), 10<<20))
		if err != nil || strings.TrimSpace(string(b)) == "" {
			return fail(1, "Error: Input must be provided either through stdin or as a prompt argument when using --print")
		}
		o.prompt = string(b)
	}
	return nil
}
