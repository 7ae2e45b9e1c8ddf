package workerdef

import (
	"fmt"
	"io/fs"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"
	"go.yaml.in/yaml/v4"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

var (
	idPattern       = regexp.MustCompile(`^[a-z][a-z0-9_]*_v[0-9]+$`)
	toolNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,127}$`)
	userPattern     = regexp.MustCompile(`^[0-9]{1,10}(:[0-9]{1,10})?$`)
	runtimePattern  = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)
)

var agentBackends = []string{"claude", "codex", "opencode", "gemini", "command"}

// validator checks what decoding cannot: required fields, enums, ranges and
// cross-field rules. Each error points at the field's position, or at the
// nearest enclosing field that was written (the rule of a missing
// expression), or at the definition's own file when none was.
type validator struct {
	fsys      fs.FS
	origin    map[*yaml.Node]string
	positions map[string]*yaml.Node
	root      *yaml.Node // the definition file's own mapping
	file      string
	errs      Errors
}

func (v *validator) fail(path, format string, args ...any) {
	n, ok := v.positions[path]
	for !ok && path != "" {
		path = parentPath(path)
		n, ok = v.positions[path]
	}
	file := v.origin[n]
	if !ok || file == "" || file == "(defaults)" {
		n, file = v.root, v.file
	}
	v.errs = append(v.errs, &Error{File: file, Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
}

// parentPath is the field path that encloses path: "result.rules[0]" for
// "result.rules[0].expression", "result.rules" for "result.rules[0]", "" at
// the top.
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func (v *validator) validate(d *meshtype.Definition) {
	if !idPattern.MatchString(d.ID) {
		v.fail("id", "id %q must match %s (lower case, with a version suffix such as _v1)", d.ID, idPattern)
	}
	if !d.Abstract {
		if d.Name == "" {
			v.fail("name", "missing name")
		}
		if d.Image == "" && d.Isolation.Level != meshtype.IsolationProcess {
			v.fail("image", "missing image")
		}
		if len(d.Tools) == 0 {
			v.fail("tools", "missing tools: list the action types (or tool names) the worker accepts")
		}
	}
	v.validateKind(d)
	v.validateTools(d)
	v.validateIsolation(&d.Isolation)
	v.validateConstraints(&d.Constraints)
	v.validateResult(&d.Result)
	v.validatePool(d)
}

func (v *validator) validateKind(d *meshtype.Definition) {
	switch d.Kind {
	case meshtype.KindBuiltin, meshtype.KindAgent, meshtype.KindMCP:
	case "":
		if !d.Abstract {
			v.fail("kind", "missing kind: builtin, agent or mcp")
		}
	default:
		v.fail("kind", "kind %q is not one of builtin, agent, mcp", d.Kind)
	}
	if d.Agent != nil && d.Kind != meshtype.KindAgent {
		v.fail("agent", "agent settings are only for kind agent")
	}
	if d.MCP != nil && d.Kind != meshtype.KindMCP {
		v.fail("mcp", "mcp settings are only for kind mcp")
	}
	if d.Kind == meshtype.KindAgent && !d.Abstract {
		if d.Agent == nil {
			v.fail("agent", "kind agent needs an agent section with a backend")
		} else {
			v.validateAgent(d.Agent)
		}
	}
	if d.Kind == meshtype.KindMCP && !d.Abstract && (d.MCP == nil || len(d.MCP.Command) == 0) {
		v.fail("mcp", "kind mcp needs mcp.command, the argv of the image's MCP server")
	}
}

func (v *validator) validateAgent(a *meshtype.AgentSpec) {
	if !slices.Contains(agentBackends, a.Backend) {
		v.fail("agent.backend", "agent.backend %q is not one of %v", a.Backend, agentBackends)
	}
	if a.MaxTurns < 0 {
		v.fail("agent.max_turns", "agent.max_turns must not be negative")
	}
	for i, t := range a.AllowedTools {
		if t == "" {
			v.fail("agent.allowed_tools["+strconv.Itoa(i)+"]", "empty tool name")
		}
	}
	if p := a.SystemPrompt; p != "" {
		if !cleanPromptPath(p) {
			v.fail("agent.system_prompt", "agent.system_prompt %q must be a clean path inside the catalog", p)
		} else if st, err := fs.Stat(v.fsys, p); err != nil || st.IsDir() {
			v.fail("agent.system_prompt", "agent.system_prompt %q: no such file in the catalog", p)
		}
	}
}

func (v *validator) validateTools(d *meshtype.Definition) {
	seen := map[string]bool{}
	for i, t := range d.Tools {
		path := "tools[" + strconv.Itoa(i) + "]"
		switch {
		case seen[t]:
			v.fail(path, "tool %q is listed twice", t)
		case !toolNamePattern.MatchString(t):
			v.fail(path, "tool %q is not a valid action type or tool name", t)
		case d.Kind == meshtype.KindAgent && !meshtype.ActionType(t).Valid():
			v.fail(path, "tool %q: agent workers accept action types only (task, read, write, ...)", t)
		case d.Kind != meshtype.KindAgent && t == string(meshtype.ActionTask):
			v.fail(path, "tool %q is only for agent workers", t)
		}
		seen[t] = true
	}
}

// hostnamePattern is a DNS name (letters, digits, hyphens, dots) or an
// IPv4 address.
var hostnamePattern = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// egressProblem says what is wrong with an egress entry, or "".
func egressProblem(hp string) string {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "must be host:port"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "has no port from 1 to 65535"
	}
	if ip := net.ParseIP(host); ip == nil && (len(host) > 253 || !hostnamePattern.MatchString(host)) {
		return "names no host: a DNS name or an IP address, without wildcards"
	}
	return ""
}

func (v *validator) validateIsolation(iso *meshtype.Isolation) {
	switch iso.Level {
	case meshtype.IsolationContainer, meshtype.IsolationProcess:
	default:
		v.fail("isolation.level", "isolation.level %q is not one of container, process", iso.Level)
	}
	if !runtimePattern.MatchString(iso.Runtime) {
		v.fail("isolation.runtime", "isolation.runtime %q is not a runtime name such as runc or runsc", iso.Runtime)
	}
	switch iso.Network {
	case meshtype.NetworkNone, meshtype.NetworkBridge, meshtype.NetworkEgress:
	default:
		v.fail("isolation.network", "isolation.network %q is not one of none, egress, bridge", iso.Network)
	}
	if len(iso.Egress) > 0 && iso.Network != meshtype.NetworkEgress {
		v.fail("isolation.egress", "isolation.egress needs isolation.network: egress (it is %s)", iso.Network)
	}
	for i, hp := range iso.Egress {
		if msg := egressProblem(hp); msg != "" {
			v.fail(fmt.Sprintf("isolation.egress[%d]", i), "isolation.egress[%d] %q %s", i, hp, msg)
		}
	}
	if !userPattern.MatchString(iso.User) {
		v.fail("isolation.user", "isolation.user %q must be a numeric uid or uid:gid", iso.User)
	} else if uid, _, _ := strings.Cut(iso.User, ":"); strings.Trim(uid, "0") == "" {
		v.fail("isolation.user", "isolation.user must not be root (uid 0)")
	}
	r := iso.Resources
	if r.CPUs <= 0 || r.CPUs > 256 {
		v.fail("isolation.resources.cpus", "isolation.resources.cpus must be above 0 and at most 256, got %v", r.CPUs)
	}
	if r.Memory < 6*1000*1000 {
		v.fail("isolation.resources.memory", "isolation.resources.memory must be at least 6MB (Docker's minimum), got %s", r.Memory)
	}
	if r.PIDs <= 0 {
		v.fail("isolation.resources.pids", "isolation.resources.pids must be above 0, got %d", r.PIDs)
	}
	if r.Workspace <= 0 {
		v.fail("isolation.resources.workspace", "isolation.resources.workspace must be above 0, got %s", r.Workspace)
	}
	if r.WorkspaceFiles <= 0 {
		v.fail("isolation.resources.workspace_files", "isolation.resources.workspace_files must be above 0, got %d", r.WorkspaceFiles)
	}
}

// MaxPoolSize bounds a definition's warm pool.
const MaxPoolSize = 64

func (v *validator) validatePool(d *meshtype.Definition) {
	p := d.Pool
	if p.Size < 0 || p.Size > MaxPoolSize {
		v.fail("pool.size", "pool.size must be from 0 to %d, got %d", MaxPoolSize, p.Size)
	}
	if p.MaxAge < meshtype.Duration(time.Minute) {
		v.fail("pool.max_age", "pool.max_age must be at least 1m, got %s", p.MaxAge)
	}
	if p.Size > 0 && d.Isolation.Level != meshtype.IsolationContainer {
		v.fail("pool.size", "a pool needs isolation.level container (it is %s)", d.Isolation.Level)
	}
}

// MaxActionTimeout bounds a definition's constraints.action_timeout: an
// agent worker's mesh-exec caps a task at an hour too.
const MaxActionTimeout = time.Hour

func (v *validator) validateConstraints(c *meshtype.Constraints) {
	if c.MaxFileSize < 0 {
		v.fail("constraints.max_file_size", "constraints.max_file_size must not be negative")
	}
	if t := time.Duration(c.ActionTimeout); t != 0 && (t < time.Second || t > MaxActionTimeout) {
		v.fail("constraints.action_timeout", "constraints.action_timeout must be from 1s to %s, got %s", MaxActionTimeout, c.ActionTimeout)
	}
	v.validateGlobs("constraints.allowed_paths", c.AllowedPaths)
	v.validateGlobs("constraints.denied_paths", c.DeniedPaths)
	if c.MaxActions < 0 {
		v.fail("constraints.max_actions", "constraints.max_actions must not be negative")
	}
	if c.MaxCostUSD < 0 {
		v.fail("constraints.max_cost_usd", "constraints.max_cost_usd must not be negative")
	}
}

// validateResult checks the result block, the gate on what leaves a worker.
// Its rules are checked when the gate compiles them.
func (v *validator) validateResult(r *meshtype.ResultConstraints) {
	if r.MaxChangedFiles < 0 {
		v.fail("result.max_changed_files", "result.max_changed_files must not be negative")
	}
	if r.MaxDiffBytes < 0 {
		v.fail("result.max_diff_bytes", "result.max_diff_bytes must not be negative")
	}
	v.validateGlobs("result.denied_paths", r.DeniedPaths)
}

// validateGlobs checks a list of workspace globs written at field, saying
// more than the gate's compile error can about what is wrong with one.
func (v *validator) validateGlobs(field string, globs []string) {
	for i, g := range globs {
		path := field + "[" + strconv.Itoa(i) + "]"
		switch {
		case g == "":
			v.fail(path, "empty glob")
		case g[0] == '/':
			v.fail(path, "glob %q: globs are anchored at the workspace root already; drop the leading /", g)
		case !doublestar.ValidatePattern(g):
			v.fail(path, "glob %q is not a valid pattern", g)
		}
	}
}
