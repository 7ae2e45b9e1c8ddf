package gate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Built-in constraint ids, as reported in Violation.ConstraintID.
const (
	ConstraintTools       = "tools"
	ConstraintReadonly    = "readonly"
	ConstraintMaxFileSize = "max_file_size"
	ConstraintPathSafety  = "path_safety"
	ConstraintAllowed     = "allowed_paths"
	ConstraintDenied      = "denied_paths"
	ConstraintCommands    = "commands"
	ConstraintMaxActions  = "max_actions"
	ConstraintMaxCost     = "max_cost_usd"
)

var builtinIDs = []string{
	ConstraintTools, ConstraintReadonly, ConstraintMaxFileSize, ConstraintPathSafety,
	ConstraintAllowed, ConstraintDenied, ConstraintCommands, ConstraintMaxActions, ConstraintMaxCost,
}

// CompileError is a problem in a definition's constraints or result
// constraints. Path names the offending field the way the definition file
// spells it ("constraints.rules[0].expression", "result.denied_paths[1]"), so
// loaders can point at it.
type CompileError struct {
	Path string
	Msg  string
}

func (e *CompileError) Error() string { return e.Path + ": " + e.Msg }

// Gate is the compiled form of one definition's constraints and result
// constraints.
type Gate struct {
	kind        meshtype.Kind
	tools       []string
	readonly    bool
	maxFileSize int64
	allowed     []glob
	denied      []glob
	commands    [][]string
	maxActions  int64
	maxCostUSD  float64
	rules       []*rule
	result      resultGate
	agent       agentGate
}

// Compile builds the gate for a definition, its result block included. It
// fails with a *CompileError on a malformed command entry, a bad glob, or a
// rule whose id is invalid or taken, or whose CEL does not compile or does
// not type-check.
func Compile(def *meshtype.Definition) (*Gate, error) {
	c := &def.Constraints
	g := &Gate{
		kind:        def.Kind,
		tools:       slices.Clone(def.Tools),
		readonly:    c.Readonly,
		maxFileSize: int64(c.MaxFileSize),
		maxActions:  c.MaxActions,
		maxCostUSD:  c.MaxCostUSD,
	}
	var err error
	if g.allowed, err = compileGlobs("constraints.allowed_paths", c.AllowedPaths); err != nil {
		return nil, err
	}
	if g.denied, err = compileGlobs("constraints.denied_paths", c.DeniedPaths); err != nil {
		return nil, err
	}
	for i, entry := range c.Commands {
		argv := strings.Fields(entry)
		if len(argv) == 0 {
			return nil, &CompileError{Path: "constraints.commands[" + strconv.Itoa(i) + "]", Msg: "empty command"}
		}
		// A prefix the argv check would refuse could never run.
		if t := argvToolFor(argv[0]); t != nil {
			if msg := t.check(argv[1:], true); msg != "" {
				return nil, &CompileError{Path: "constraints.commands[" + strconv.Itoa(i) + "]", Msg: msg}
			}
		}
		g.commands = append(g.commands, argv)
	}
	if g.rules, err = actionRules.compile(c.Rules); err != nil {
		return nil, err
	}
	if g.result, err = compileResult(&def.Result, g.denied); err != nil {
		return nil, err
	}
	g.agent = compileAgent(def)
	return g, nil
}

// Evaluate checks one action against every constraint and returns all the
// violations, or nil when the action may run. It does no I/O.
func (g *Gate) Evaluate(a *meshtype.Action, state meshtype.JourneyState) []meshtype.Violation {
	var c collector
	add := c.add

	if a.Type == meshtype.ActionTool && g.kind == meshtype.KindBuiltin && meshtype.ActionType(a.Tool).Valid() {
		// meshworker serves the typed actions as tools of the same names; a
		// tool action naming one would reach it without the checks its typed
		// action gets (paths, sizes, commands).
		add(ConstraintTools, fmt.Sprintf("tool %q must be called as a {\"type\": %q} action", a.Tool, a.Tool))
	} else if !g.toolAllowed(a) {
		if a.Type == meshtype.ActionTool {
			add(ConstraintTools, fmt.Sprintf("tool %q is not among this worker's tools %v", a.Tool, g.tools))
		} else {
			add(ConstraintTools, fmt.Sprintf("action type %q is not among this worker's tools %v", a.Type, g.tools))
		}
	}
	if g.readonly && (a.Type == meshtype.ActionWrite || a.Type == meshtype.ActionDelete) {
		add(ConstraintReadonly, fmt.Sprintf("worker is read-only: %s actions are refused", a.Type))
	}
	if takesTarget(a.Type) {
		g.checkPath(a, &c)
	}
	if a.Type == meshtype.ActionTool && g.kind == meshtype.KindBuiltin {
		g.checkToolPaths(a, &c)
	}
	g.checkContent(a, &c)
	if g.maxActions > 0 && state.ActionCount >= g.maxActions {
		add(ConstraintMaxActions, fmt.Sprintf("Action limit reached: %d of %d actions used", state.ActionCount, g.maxActions))
	}
	if g.maxCostUSD > 0 && state.CostUSD >= g.maxCostUSD {
		add(ConstraintMaxCost, fmt.Sprintf("Cost limit reached: $%.4f spent of a $%.2f budget", state.CostUSD, g.maxCostUSD))
	}
	g.checkRules(a, state, &c)
	return c.vs
}

// checkContent applies max_file_size to a write's content and the command
// allowlist to an exec's argv.
func (g *Gate) checkContent(a *meshtype.Action, c *collector) {
	if a.Type == meshtype.ActionWrite && g.maxFileSize > 0 && int64(len(a.Content)) > g.maxFileSize {
		c.add(ConstraintMaxFileSize, fmt.Sprintf("File size %d bytes exceeds limit %d bytes", len(a.Content), g.maxFileSize))
	}
	if a.Type == meshtype.ActionExec {
		if msg := g.checkCommand(a.Command); msg != "" {
			c.add(ConstraintCommands, msg)
		}
	}
}

// checkRules runs the user rules on an action.
func (g *Gate) checkRules(a *meshtype.Action, state meshtype.JourneyState, c *collector) {
	if len(g.rules) == 0 {
		return
	}
	// A copy, so that only evaluations with rules move the state to the heap.
	st := state
	in := ruleInput{action: a, journey: &st}
	for _, r := range g.rules {
		if msg, ok := r.eval(&in); !ok {
			c.add(r.id, msg)
		}
	}
}

// collector gathers violations; a method value, unlike a closure over a
// local slice, keeps Evaluate free of allocations when nothing is violated.
type collector struct{ vs []meshtype.Violation }

func (c *collector) add(id, msg string) {
	c.vs = append(c.vs, meshtype.Violation{ConstraintID: id, Violated: true, Message: msg})
}

func (g *Gate) toolAllowed(a *meshtype.Action) bool {
	name := string(a.Type)
	if a.Type == meshtype.ActionTool {
		name = a.Tool
		if name == "" {
			return false
		}
	}
	for _, t := range g.tools {
		if t == name {
			return true
		}
	}
	return false
}

// takesTarget reports whether an action type names a workspace path.
func takesTarget(t meshtype.ActionType) bool {
	switch t {
	case meshtype.ActionRead, meshtype.ActionWrite, meshtype.ActionList, meshtype.ActionSearch, meshtype.ActionDelete:
		return true
	}
	return false
}

// checkCommand checks an exec's argv: it must start with an allowed prefix,
// and for the programs the gate knows (go, git; see argv.go) the rest must
// parse against that program's table of subcommands and flags.
func (g *Gate) checkCommand(argv []string) string {
	if len(argv) == 0 || argv[0] == "" {
		return "exec needs a command: a non-empty argv list"
	}
	for _, arg := range argv {
		if strings.IndexByte(arg, 0) >= 0 {
			return "command arguments must not contain NUL bytes"
		}
	}
	for _, prefix := range g.commands {
		if len(argv) >= len(prefix) && slices.Equal(argv[:len(prefix)], prefix) {
			if t := argvToolFor(argv[0]); t != nil {
				return t.check(argv[1:], false)
			}
			return ""
		}
	}
	if len(g.commands) == 0 {
		return "this worker allows no commands"
	}
	allowed := make([]string, len(g.commands))
	for i, p := range g.commands {
		allowed[i] = strconv.Quote(strings.Join(p, " "))
	}
	return fmt.Sprintf("command %q does not start with an allowed command (%s)", argv[0], strings.Join(allowed, ", "))
}

// builtinToolPaths names the arguments of meshworker's own tools that are
// workspace paths; the gate checks them as it checks targets.
var builtinToolPaths = map[string][]string{
	"git_add":  {"paths"},
	"git_diff": {"path"},
}

// checkToolPaths applies path safety and the globs to the path arguments of
// a builtin tool call.
func (g *Gate) checkToolPaths(a *meshtype.Action, c *collector) {
	for _, arg := range builtinToolPaths[a.Tool] {
		var paths []string
		switch v := a.Arguments[arg].(type) {
		case nil:
		case string:
			paths = []string{v}
		case []any:
			for _, x := range v {
				s, ok := x.(string)
				if !ok {
					c.add(ConstraintPathSafety, fmt.Sprintf("argument %s of %s must hold paths (strings)", arg, a.Tool))
					return
				}
				paths = append(paths, s)
			}
		default:
			c.add(ConstraintPathSafety, fmt.Sprintf("argument %s of %s must be a path or a list of paths", arg, a.Tool))
			return
		}
		for _, p := range paths {
			g.checkPath(&meshtype.Action{Type: meshtype.ActionList, Target: p}, c)
		}
	}
}
