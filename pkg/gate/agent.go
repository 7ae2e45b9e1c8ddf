package gate

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/meshwork/meshwork/pkg/gitpath"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Agent tool calls.
//
// An agent worker's actions reach the gate as tasks; what the agent then
// does inside its container, its own Read, Edit and Bash calls, is checked
// by [Gate.EvaluateToolCall], which the agent CLI's hook calls before each
// tool runs. Every call is translated into the actions it amounts to (a Read
// is a read of its file, an Edit a write of the file it leaves, a Bash
// script an exec of each simple command in it plus a read or write of each
// file it redirects from or to) and each action is checked by the same
// built-in checks and CEL rules as an action sent to the worker, except the
// per-journey counters (max_actions, max_cost_usd), which count actions,
// not the agent's steps.

// Constraint ids of the checks only tool calls get.
const (
	// ConstraintAgentTools: the tool is not among the agent's allowed_tools.
	ConstraintAgentTools = "agent_tools"
	// ConstraintShell: a Bash command that does not parse, or whose
	// commands cannot be decided without running it.
	ConstraintShell = "shell"
	// ConstraintNetwork: a tool call that reaches the network where the
	// worker's network does not allow it.
	ConstraintNetwork = "network"
	// ConstraintAgentConfig: a tool call that would change the agent's own
	// configuration (its settings, hooks, MCP servers), and so the gate.
	ConstraintAgentConfig = "agent_config"
)

// agentConfigGlobs are the files an agent CLI reads as its own
// configuration: Claude Code's project and user settings (.claude/, where a
// settings file can turn hooks off or run commands of its own), its MCP
// servers (.mcp.json), and mesh-exec's state under .meshwork/ (the agent's
// home, sessions). Whatever a definition says, an agent may not write them
// or name them to a command.
var agentConfigGlobs = []string{"**/.claude", "**/.claude/**", "**/.mcp.json", ".meshwork", ".meshwork/**"}

// agentConfig reports whether a clean workspace path is agent
// configuration: what agentConfigGlobs match, or a git directory.
func agentConfig(clean string) bool {
	return matchesAny(agentConfigGlobs, clean) || gitDir(clean)
}

// gitDir reports whether a clean workspace path is in a repository's git
// directory, under any name a file system takes for one (gitpath): its
// config can name commands git runs (core.fsmonitor, filters, hooks), and
// the CLI runs git itself, before any tool call its hooks see. An agent
// may not write them or name them to a command, but may name them as an
// option's value (grep --exclude-dir=.git), which is how commands leave
// them out.
func gitDir(clean string) bool { return gitpath.HasDotGit(clean) }

// matchesAny reports whether a clean path matches one of globs, case
// folded (the workspace may be on a case-insensitive file system).
func matchesAny(globs []string, clean string) bool {
	lower := strings.ToLower(clean)
	for _, g := range globs {
		if ok, _ := doublestar.Match(g, lower); ok {
			return true
		}
	}
	return false
}

// configKind names what agentConfig matched, for a refusal's message.
func configKind(clean string) string {
	if matchesAny(agentConfigGlobs, clean) {
		return "the agent's own configuration"
	}
	return "a git directory, whose config can name commands git runs"
}

// ToolCall is one tool call an agent is about to make, as the agent CLI's
// hook reports it (Claude Code's PreToolUse: tool_name, tool_input).
type ToolCall struct {
	// Tool is the tool's name: "Read", "Bash", "mcp__meshwork__spawn_worker".
	Tool string
	// Input is the tool's input, as the CLI passes it to the tool.
	Input map[string]any
	// Workspace is the absolute path of the workspace root; file paths
	// outside it are refused.
	Workspace string
	// Cwd is the absolute directory relative paths are taken from (the
	// agent's working directory); empty means Workspace.
	Cwd string
}

// Files is what [Gate.EvaluateToolCall] may learn of the files a call names,
// so that the gate itself stays free of I/O: the caller (the hook, inside
// the worker) answers from the file system.
type Files interface {
	// RealPath returns the absolute path abs resolves to through symbolic
	// links; for a path that does not exist yet, the deepest existing
	// parent resolved, joined with the rest.
	RealPath(abs string) (string, error)
	// ReadFile returns the content of the file at abs, an error wrapping
	// fs.ErrNotExist when there is none, or an error when it holds more
	// than limit bytes.
	ReadFile(abs string, limit int64) ([]byte, error)
}

// agentGate is the compiled agent part of a definition.
type agentGate struct {
	// allowedTools are agent.allowed_tools reduced to tool names and MCP
	// server prefixes ("Bash(go test:*)" allows the tool Bash: the rule
	// inside is the CLI's, and the gate checks the command itself).
	allowedTools []string
	network      meshtype.NetworkMode
	egress       []string // host:port pairs, for network egress
}

func compileAgent(def *meshtype.Definition) agentGate {
	a := agentGate{network: def.Isolation.Network, egress: def.Isolation.Egress}
	if def.Agent != nil {
		for _, t := range def.Agent.AllowedTools {
			if i := strings.IndexByte(t, '('); i > 0 {
				t = t[:i]
			}
			a.allowedTools = append(a.allowedTools, strings.TrimSpace(t))
		}
	}
	return a
}

// allows reports whether the agent's allowed_tools admit the tool: no list
// admits every tool; an entry admits its own name, and an MCP server entry
// (mcp__meshwork) every tool of that server.
func (a *agentGate) allows(tool string) bool {
	if len(a.allowedTools) == 0 {
		return true
	}
	for _, t := range a.allowedTools {
		if t == tool || strings.HasPrefix(t, "mcp__") && strings.Count(t, "__") == 1 && strings.HasPrefix(tool, t+"__") {
			return true
		}
	}
	return false
}

// shellBuiltins are the shell's own commands a script may use without a
// commands entry: they run no program, and what they write goes through
// redirections, which are checked.
var shellBuiltins = map[string]bool{
	"cd": true, "pwd": true, "echo": true, "printf": true, "true": true, "false": true,
	"test": true, "[": true, ":": true, "set": true,
}

// EvaluateToolCall checks one tool call of an agent and returns every
// violation, or nil when the call may run. files may be nil: then symbolic
// links are not followed and Edit sizes are not known. It does no I/O of its
// own.
//
// Checked, by tool (Claude Code's names; other agents' tools map onto them):
//   - every tool: the agent's allowed_tools;
//   - Read, Write, Edit, MultiEdit, NotebookEdit, Glob, Grep: path safety,
//     the workspace (also through symbolic links), allowed and denied paths,
//     readonly for the writing ones, max_file_size on the file a write
//     leaves, and the rules on the equivalent read, write, list or search;
//   - Bash: the script split into simple commands ([SplitShell]); each must
//     be a shell builtin (cd, echo, test, ...) or start with an allowed
//     command, its path-like arguments must not name denied files, each
//     redirection is a read or write of its file, /dev/tcp and /dev/udp are
//     refused, and the rules see each command as an exec;
//   - WebFetch: a URL whose host:port is in the egress list (network
//     egress), or any (network bridge); WebSearch: network bridge only.
func (g *Gate) EvaluateToolCall(call ToolCall, files Files) []meshtype.Violation {
	var c collector
	tc := toolCheck{g: g, call: &call, files: files, c: &c}
	if call.Workspace == "" || !path.IsAbs(call.Workspace) {
		c.add(ConstraintPathSafety, "the agent's workspace root is not known")
		return c.vs
	}
	tc.root = path.Clean(call.Workspace)
	tc.cwd = tc.root
	if call.Cwd != "" {
		tc.cwd = path.Clean(call.Cwd)
	}
	if call.Tool == "" {
		c.add(ConstraintAgentTools, "the tool call names no tool")
		return c.vs
	}
	if !g.agent.allows(call.Tool) {
		c.add(ConstraintAgentTools, fmt.Sprintf("tool %s is not among this agent's allowed tools %v", call.Tool, g.agent.allowedTools))
	}
	switch call.Tool {
	case "Read":
		tc.file(meshtype.ActionRead, "file_path", "")
	case "Write":
		tc.file(meshtype.ActionWrite, "file_path", tc.str("content"))
	case "Edit":
		tc.edit("file_path", []edit{{tc.str("old_string"), tc.str("new_string"), tc.boolean("replace_all")}})
	case "MultiEdit":
		tc.edit("file_path", tc.edits())
	case "NotebookEdit":
		tc.file(meshtype.ActionWrite, "notebook_path", tc.str("new_source"))
	case "Glob":
		tc.dir(meshtype.ActionList, "path", "")
		tc.pattern(tc.str("pattern"))
	case "Grep":
		tc.dir(meshtype.ActionSearch, "path", tc.str("pattern"))
		tc.pattern(tc.str("glob"))
		tc.globNamesDenied(tc.str("glob"))
	case "Bash":
		tc.bash(tc.str("command"))
	case "WebFetch":
		u, err := url.Parse(tc.str("url"))
		if err != nil || u.Host == "" {
			c.add(ConstraintNetwork, fmt.Sprintf("WebFetch url %q is not an absolute URL", tc.str("url")))
			break
		}
		tc.fetch(u)
	case "WebSearch":
		tc.network("search the web")
	}
	return dedupe(c.vs)
}

// dedupe drops repeated violations (the same check failing for several
// commands of one script), keeping the first of each.
func dedupe(vs []meshtype.Violation) []meshtype.Violation {
	if len(vs) < 2 {
		return vs
	}
	out := vs[:0:0]
	for _, v := range vs {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// toolCheck is one EvaluateToolCall.
type toolCheck struct {
	g     *Gate
	call  *ToolCall
	files Files
	c     *collector
	root  string // clean absolute workspace root
	cwd   string // clean absolute working directory
}

func (tc *toolCheck) str(key string) string {
	s, _ := tc.call.Input[key].(string)
	return s
}

func (tc *toolCheck) boolean(key string) bool {
	b, _ := tc.call.Input[key].(bool)
	return b
}

// workspacePath maps a path the call names onto the workspace: it returns
// the path relative to the workspace root ("." for the root), or reports a
// violation and returns false. Relative paths are taken from the working
// directory. Through Files, the path's real location must be in the
// workspace too, and the globs are checked on both names.
func (tc *toolCheck) workspacePath(p string) (rel string, real string, ok bool) {
	return tc.workspacePathFrom(p, tc.cwd)
}

// workspacePathFrom is workspacePath with relative paths taken from cwd.
func (tc *toolCheck) workspacePathFrom(p, cwd string) (rel string, real string, ok bool) {
	if p == "" {
		tc.c.add(ConstraintPathSafety, fmt.Sprintf("%s needs a path", tc.call.Tool))
		return "", "", false
	}
	if strings.IndexByte(p, 0) >= 0 {
		tc.c.add(ConstraintPathSafety, "path contains a NUL byte")
		return "", "", false
	}
	joined := join(p, cwd)
	abs := path.Clean(joined)
	rel, ok = tc.relative(abs)
	if !ok {
		tc.c.add(ConstraintPathSafety, fmt.Sprintf("path %q is outside the workspace %s", p, tc.root))
		return "", "", false
	}
	if rel != "." {
		if msg := targetProblem(rel); msg != "" {
			tc.c.add(ConstraintPathSafety, msg)
			return "", "", false
		}
	}
	real = rel
	if tc.files != nil {
		r, err := tc.files.RealPath(joined)
		if err != nil {
			tc.c.add(ConstraintPathSafety, fmt.Sprintf("path %q cannot be resolved: %v", p, err))
			return "", "", false
		}
		if real, ok = tc.relative(path.Clean(r)); !ok {
			tc.c.add(ConstraintPathSafety, fmt.Sprintf("path %q resolves through a symbolic link to %s, outside the workspace", p, r))
			return "", "", false
		}
	}
	return rel, real, true
}

// relative returns abs relative to the workspace root, if it is inside.
func (tc *toolCheck) relative(abs string) (string, bool) {
	if abs == tc.root {
		return ".", true
	}
	if tc.root == "/" {
		return abs[1:], true
	}
	rest, ok := strings.CutPrefix(abs, tc.root+"/")
	return rest, ok
}

// action checks one equivalent action on a workspace path (and on the path
// it really is, when that differs) with the built-in checks and the rules.
func (tc *toolCheck) action(a meshtype.Action, real string) {
	g := tc.g
	if g.readonly && a.Type == meshtype.ActionWrite {
		tc.c.add(ConstraintReadonly, fmt.Sprintf("worker is read-only: %s may not write %s", tc.call.Tool, a.Target))
	}
	if a.Type == meshtype.ActionWrite {
		switch {
		case agentConfig(a.Target):
			tc.c.add(ConstraintAgentConfig, fmt.Sprintf("%s may not write %s: it is %s", tc.call.Tool, a.Target, configKind(a.Target)))
		case real != "" && agentConfig(real):
			tc.c.add(ConstraintAgentConfig, fmt.Sprintf("%s may not write %s: through a symbolic link it is %s, %s", tc.call.Tool, a.Target, real, configKind(real)))
		}
	}
	if takesTarget(a.Type) {
		if a.Target == "." && a.Type != meshtype.ActionList && a.Type != meshtype.ActionSearch {
			tc.c.add(ConstraintPathSafety, fmt.Sprintf("%s cannot target the workspace root", tc.call.Tool))
		} else {
			g.checkGlobs(a.Target, tc.c)
			if real != "" && real != a.Target {
				g.checkGlobs(real, tc.c)
			}
		}
	}
	g.checkContent(&a, tc.c)
	g.checkRules(&a, meshtype.JourneyState{}, tc.c)
}

// file checks a file tool: a read, or a write of content.
func (tc *toolCheck) file(t meshtype.ActionType, key, content string) {
	rel, real, ok := tc.workspacePath(tc.str(key))
	if !ok {
		return
	}
	tc.action(meshtype.Action{Type: t, Target: rel, Content: content}, real)
}

// dir checks a tool that reads a directory (Glob, Grep): its path, by
// default the working directory.
func (tc *toolCheck) dir(t meshtype.ActionType, key, pattern string) {
	p := tc.str(key)
	if p == "" {
		p = tc.cwd
	}
	rel, real, ok := tc.workspacePath(p)
	if !ok {
		return
	}
	tc.action(meshtype.Action{Type: t, Target: rel, Pattern: pattern}, real)
}

// pattern checks a file-name glob (Glob's pattern, Grep's glob): it must not
// leave the working directory.
func (tc *toolCheck) pattern(p string) {
	if p == "" {
		return
	}
	if path.IsAbs(p) {
		if _, ok := tc.relative(path.Clean(p)); !ok {
			tc.c.add(ConstraintPathSafety, fmt.Sprintf("pattern %q is outside the workspace %s", p, tc.root))
		}
		return
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		tc.c.add(ConstraintPathSafety, fmt.Sprintf("pattern %q climbs out of its directory with ..", p))
	}
}

// globNamesDenied refuses a Grep whose file glob is itself a denied path
// (glob ".env" searches every .env): the search root is checked, and the
// CLI's read rules keep denied files out of a search (agenthook.Settings),
// but a glob that names them says what the call is for. A glob that only
// matches them (*.env, .en?) is not caught here; the read rules are what
// keep those files out.
func (tc *toolCheck) globNamesDenied(glob string) {
	if glob == "" {
		return
	}
	for _, p := range []string{glob, path.Base(glob)} {
		if d, denied := deniedBy(tc.g.denied, path.Clean(p)); denied {
			tc.c.add(ConstraintDenied, fmt.Sprintf("Grep glob %q names files denied by %q", glob, d))
			return
		}
	}
}

// edit is one replacement of an Edit or MultiEdit.
type edit struct {
	old, new string
	all      bool
}

func (tc *toolCheck) edits() []edit {
	list, _ := tc.call.Input["edits"].([]any)
	var out []edit
	for _, e := range list {
		m, _ := e.(map[string]any)
		o, _ := m["old_string"].(string)
		n, _ := m["new_string"].(string)
		all, _ := m["replace_all"].(bool)
		out = append(out, edit{o, n, all})
	}
	return out
}

// edit checks an Edit or MultiEdit as a write of the file it would leave:
// max_file_size and the rules apply to that file, computed from the current
// one when Files can read it. An edit with an empty old_string on a file
// that does not exist creates it from new_string. The size is computed
// before the file is, so an edit that would make a huge file is refused
// without building it.
func (tc *toolCheck) edit(key string, edits []edit) {
	rel, real, ok := tc.workspacePath(tc.str(key))
	if !ok {
		return
	}
	limit := tc.g.maxFileSize
	if limit <= 0 {
		limit = maxEditResult
	}
	var content string
	if tc.files != nil {
		data, err := tc.files.ReadFile(path.Join(tc.root, rel), limit)
		switch {
		case err == nil:
			content = string(data)
		case errors.Is(err, fs.ErrNotExist):
		default:
			tc.c.add(ConstraintMaxFileSize, fmt.Sprintf("%s of %s: %v", tc.call.Tool, rel, err))
			return
		}
	}
	for _, e := range edits {
		size := int64(len(content))
		if e.old == "" {
			// Creates the file (when there is none): its content is new.
			size = int64(len(e.new))
			if size <= limit {
				content = e.new
			}
		} else {
			n := int64(1)
			if e.all {
				n = int64(strings.Count(content, e.old))
			} else if !strings.Contains(content, e.old) {
				n = 0
			}
			size += n * (int64(len(e.new)) - int64(len(e.old)))
			if size <= limit {
				content = strings.Replace(content, e.old, e.new, int(max(n, 0)))
			}
		}
		if size > limit {
			tc.c.add(ConstraintMaxFileSize, fmt.Sprintf("File size %d bytes exceeds limit %d bytes", size, limit))
			return
		}
	}
	tc.action(meshtype.Action{Type: meshtype.ActionWrite, Target: rel, Content: content}, real)
}

// maxEditResult bounds the file an edit may leave when the worker has no
// max_file_size: the gate builds it to check it.
const maxEditResult = 64 << 20

// fetch checks a URL the agent fetches: with network egress, its host and
// port must be in the egress list; otherwise the network must be open.
func (tc *toolCheck) fetch(u *url.URL) {
	if tc.g.agent.network != meshtype.NetworkEgress {
		tc.network("fetch " + u.String())
		return
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	hp := strings.ToLower(u.Hostname()) + ":" + port
	for _, e := range tc.g.agent.egress {
		if strings.EqualFold(e, hp) {
			return
		}
	}
	tc.c.add(ConstraintNetwork, fmt.Sprintf("WebFetch may not fetch %s: %s is not in this worker's egress list %v", u, hp, tc.g.agent.egress))
}

// network refuses a tool that reaches the network unless the worker's
// network is open.
func (tc *toolCheck) network(what string) {
	if tc.g.agent.network != meshtype.NetworkBridge {
		network := tc.g.agent.network
		if network == "" {
			network = meshtype.NetworkNone
		}
		tc.c.add(ConstraintNetwork, fmt.Sprintf("%s may not %s: this worker's network is %s", tc.call.Tool, what, network))
	}
}

// bash checks a Bash script, command by command. A cd changes where the
// later commands' relative paths point; the split does not follow the
// shell's control flow, so every path is checked from the agent's working
// directory and from every directory a cd before it may have entered. That
// set can double with each cd, so it is bounded (maxWorkingDirs), as is the
// number of paths checked in all (maxPathChecks): a script past either is
// refused, not checked for longer than the agent's hook waits.
func (tc *toolCheck) bash(script string) {
	cmds, err := SplitShell(script)
	if err != nil {
		tc.c.add(ConstraintShell, err.Error())
		return
	}
	cwds := []string{tc.cwd}
	known := map[string]bool{tc.cwd: true}
	checks := 0
	for _, cmd := range cmds {
		name := cmd.Argv[0]
		if shellBuiltins[name] {
			tc.g.checkRules(&meshtype.Action{Type: meshtype.ActionExec, Command: cmd.Argv}, meshtype.JourneyState{}, tc.c)
		} else {
			tc.action(meshtype.Action{Type: meshtype.ActionExec, Command: cmd.Argv}, "")
		}
		if checks += len(cwds) * (len(cmd.Argv) - 1 + len(cmd.Writes) + len(cmd.Reads)); checks > maxPathChecks {
			tc.c.add(ConstraintShell, fmt.Sprintf("the script names more than %d paths to check (each from every directory a cd may have entered); split it", maxPathChecks))
			return
		}
		for _, arg := range cmd.Argv[1:] {
			for _, cwd := range cwds {
				tc.argument(arg, cwd)
			}
		}
		for _, cwd := range cwds {
			for _, w := range cmd.Writes {
				tc.redirect(meshtype.ActionWrite, w, cwd)
			}
			for _, r := range cmd.Reads {
				tc.redirect(meshtype.ActionRead, r, cwd)
			}
		}
		if name != "cd" {
			continue
		}
		target, problem := cdTarget(cmd.Argv)
		if problem != "" {
			tc.c.add(ConstraintPathSafety, fmt.Sprintf("%q %s; cd to one directory in the workspace %s", strings.Join(cmd.Argv, " "), problem, tc.root))
			continue
		}
		for _, cwd := range slices.Clone(cwds) {
			for _, dir := range tc.cdDirs(target, cwd) {
				if _, inside := tc.relative(dir); !inside {
					tc.c.add(ConstraintPathSafety, fmt.Sprintf("cd %q leaves the workspace %s", target, tc.root))
					continue
				}
				if !known[dir] {
					known[dir] = true
					cwds = append(cwds, dir)
				}
			}
		}
		if len(cwds) > maxWorkingDirs {
			tc.c.add(ConstraintShell, fmt.Sprintf("the script's cds may enter more than %d directories; split it", maxWorkingDirs))
			return
		}
	}
}

// The bounds on checking a Bash script.
const (
	// maxWorkingDirs bounds the directories a script's cds may have
	// entered, each of which every later path is checked from.
	maxWorkingDirs = 64
	// maxPathChecks bounds the paths checked in all: arguments and
	// redirections, once from each of those directories.
	maxPathChecks = 20000
)

// cdTarget is the directory operand of a cd, as bash reads its arguments:
// options (-L, -P, -e, -@) first, "--" ending them. No operand goes home,
// and "-" to the previous directory, which the gate does not follow; bash
// refuses more than one operand, and an empty one goes nowhere. For those,
// problem says so.
func cdTarget(argv []string) (target, problem string) {
	args := argv[1:]
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		if args[0] == "--" {
			args = args[1:]
			break
		}
		args = args[1:]
	}
	switch {
	case len(args) == 0:
		return "", "goes to the home directory, outside the workspace"
	case len(args) > 1:
		return "", "names more than one directory"
	case args[0] == "-":
		return "", "goes to the previous directory, which the gate does not follow"
	case args[0] == "":
		return "", "names no directory"
	}
	return args[0], ""
}

// cdDirs are the directories cd target may enter from cwd: bash's logical
// cd cleans target's ".." against the path as written; a physical one (cd
// -P, set -P) resolves the links first. Both are returned when they
// differ, as the script's options are not followed.
func (tc *toolCheck) cdDirs(target, cwd string) []string {
	joined := join(target, cwd)
	dirs := []string{path.Clean(joined)}
	if tc.files != nil {
		if r, err := tc.files.RealPath(joined); err == nil && path.Clean(r) != dirs[0] {
			dirs = append(dirs, path.Clean(r))
		}
	}
	return dirs
}

// join makes p absolute from cwd, not cleaned: the kernel follows a
// symbolic link before a ".." after it applies (l/.. is l's target's
// parent), so what Files.RealPath resolves is the path as written; the
// cleaned one is the name the globs see.
func join(p, cwd string) string {
	if path.IsAbs(p) {
		return p
	}
	return cwd + "/" + p
}

// argument checks a command argument that may name a file, as a path or as
// the value of an option (--file=.env, -f.env): it must stay in the
// workspace, also through symbolic links, and name no denied file and no
// agent configuration: `cat .env` reads what a Read of .env may not.
func (tc *toolCheck) argument(arg, cwd string) {
	values := []string{arg}
	option := strings.HasPrefix(arg, "-")
	if option {
		values = nil
		if i := strings.IndexByte(arg, '='); i >= 0 {
			values = append(values, arg[i+1:])
		} else if !strings.HasPrefix(arg, "--") && len(arg) > 2 {
			values = append(values, arg[2:]) // an attached short option value
		}
	}
	for _, v := range values {
		if v == "" || v == "-" || strings.IndexByte(v, 0) >= 0 {
			continue
		}
		joined := join(v, cwd)
		abs := path.Clean(joined)
		rel, inside := tc.relative(abs)
		if !inside {
			tc.c.add(ConstraintPathSafety, fmt.Sprintf("argument %q names %s, outside the workspace %s", arg, abs, tc.root))
			continue
		}
		tc.namesFile(arg, rel, option)
		if tc.files == nil || rel == "." {
			continue
		}
		if r, err := tc.files.RealPath(joined); err == nil {
			if real, inside := tc.relative(path.Clean(r)); !inside {
				tc.c.add(ConstraintPathSafety, fmt.Sprintf("argument %q resolves through a symbolic link to %s, outside the workspace", arg, r))
			} else if real != rel {
				tc.namesFile(arg, real, option)
			}
		}
	}
}

// namesFile refuses an argument that names a denied file or the agent's
// configuration; a git directory only when it is not an option's value.
func (tc *toolCheck) namesFile(arg, rel string, optionValue bool) {
	if rel == "." {
		return
	}
	if p, denied := deniedBy(tc.g.denied, rel); denied {
		tc.c.add(ConstraintDenied, fmt.Sprintf("argument %q names %s, denied by %q", arg, rel, p))
	}
	if matchesAny(agentConfigGlobs, rel) || !optionValue && gitDir(rel) {
		tc.c.add(ConstraintAgentConfig, fmt.Sprintf("argument %q names %s, %s", arg, rel, configKind(rel)))
	}
}

// redirect checks a file a command's redirection reads or writes.
func (tc *toolCheck) redirect(t meshtype.ActionType, target, cwd string) {
	switch {
	case target == "/dev/null":
		return
	case strings.HasPrefix(target, "/dev/tcp/"), strings.HasPrefix(target, "/dev/udp/"):
		tc.c.add(ConstraintNetwork, fmt.Sprintf("redirection to %s opens a network connection", target))
		return
	case t == meshtype.ActionWrite && (target == "/dev/stdout" || target == "/dev/stderr"):
		return
	}
	rel, real, ok := tc.workspacePathFrom(target, cwd)
	if !ok {
		return
	}
	tc.action(meshtype.Action{Type: t, Target: rel}, real)
}

// checkGlobs applies the allowed and denied globs to a clean workspace path.
func (g *Gate) checkGlobs(clean string, c *collector) {
	if !g.allowedPath(clean) {
		c.add(ConstraintAllowed, fmt.Sprintf("path %q is not inside the allowed paths", clean))
	}
	if p, ok := deniedBy(g.denied, clean); ok {
		c.add(ConstraintDenied, fmt.Sprintf("path %q is denied by %q", clean, p))
	}
}
