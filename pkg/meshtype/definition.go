package meshtype

// Kind says which executor runs a worker's actions.
type Kind string

// The kinds of worker.
const (
	// KindBuiltin workers run meshworker, which serves file, search, exec and
	// git actions confined to /workspace.
	KindBuiltin Kind = "builtin"
	// KindAgent workers run a coding agent CLI behind mesh-exec.
	KindAgent Kind = "agent"
	// KindMCP workers are any image whose command is an MCP server on stdio.
	KindMCP Kind = "mcp"
)

// IsolationLevel says how a worker is kept apart from the host.
type IsolationLevel string

// The isolation levels.
const (
	// IsolationContainer runs the worker in its own hardened container.
	IsolationContainer IsolationLevel = "container"
	// IsolationProcess runs the worker as a plain subprocess confined only to
	// its workspace directory. It is for development machines without Docker.
	IsolationProcess IsolationLevel = "process"
)

// NetworkMode is a worker container's network.
type NetworkMode string

// The network modes.
const (
	NetworkNone   NetworkMode = "none"
	NetworkBridge NetworkMode = "bridge" // open: the worker reaches anything
	// NetworkEgress puts the worker on an internal network whose only way
	// out is the marketplace's egress proxy, which allows Isolation.Egress.
	NetworkEgress NetworkMode = "egress"
)

// Definition is a worker definition from the catalog (workers/*.yaml), after
// its extends chain is merged and defaults are filled in.
type Definition struct {
	// ID is unique in a catalog and carries a version: ^[a-z][a-z0-9_]*_v[0-9]+$.
	ID string `yaml:"id" json:"id" jsonschema:"unique id with a version suffix, e.g. filesystem_research_v1"`
	// Extends names the definition this one is deep-merged onto.
	Extends string `yaml:"extends,omitempty" json:"extends,omitempty" jsonschema:"id of a base definition to deep-merge onto: maps merge, lists replace"`
	// Abstract definitions exist only to be extended: they are not listed
	// and cannot be spawned.
	Abstract    bool   `yaml:"abstract,omitempty" json:"abstract,omitempty" jsonschema:"true for a base that exists only to be extended"`
	Name        string `yaml:"name,omitempty" json:"name,omitempty" jsonschema:"human-readable name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty" jsonschema:"what the worker is for"`
	Kind        Kind   `yaml:"kind,omitempty" json:"kind,omitempty" jsonschema:"builtin (meshworker tools), agent (mesh-exec) or mcp (any MCP server image)"`
	Image       string `yaml:"image,omitempty" json:"image,omitempty" jsonschema:"container image the worker runs"`
	// Tools lists the action types the worker accepts; for "tool" actions it
	// lists the tool names that may be called.
	Tools       []string    `yaml:"tools,omitempty" json:"tools,omitempty" jsonschema:"action types the worker accepts, and tool names callable with tool actions"`
	Isolation   Isolation   `yaml:"isolation,omitempty" json:"isolation,omitzero"`
	Constraints Constraints `yaml:"constraints,omitempty" json:"constraints,omitzero"`
	// Result is the gate on what leaves the worker: the change a diff or an
	// export carries out of the workspace.
	Result ResultConstraints `yaml:"result,omitempty" json:"result,omitzero"`
	Agent  *AgentSpec        `yaml:"agent,omitempty" json:"agent,omitempty" jsonschema:"agent settings; kind agent only"`
	MCP    *MCPSpec          `yaml:"mcp,omitempty" json:"mcp,omitempty" jsonschema:"MCP server settings; kind mcp only"`
	// Pool keeps workers of this definition created and started ahead of
	// any spawn, for spawn_worker to claim.
	Pool PoolSpec `yaml:"pool,omitempty" json:"pool,omitzero" jsonschema:"warm pool: workers kept started ahead of spawns, each claimed by one journey only"`
}

// PoolSpec is a warm pool: Size workers created, started and hardened as a
// spawn would make them, each with a fresh empty workspace, that
// spawn_worker hands out (and the marketplace replaces) instead of creating
// one. A pool member is never handed to a second journey.
type PoolSpec struct {
	Size int `yaml:"size,omitempty" json:"size,omitempty" jsonschema:"workers kept ready (0: no pool; at most 64)"`
	// MaxAge bounds how long a member waits unclaimed; older ones are
	// replaced, so a pool follows a rebuilt image within MaxAge.
	MaxAge Duration `yaml:"max_age,omitempty" json:"max_age,omitzero" jsonschema:"replace a member unclaimed this long (default 1h, at least 1m)"`
}

// Isolation is how a worker's container is confined.
type Isolation struct {
	Level   IsolationLevel `yaml:"level,omitempty" json:"level,omitempty" jsonschema:"container (default) or process (no Docker; development only)"`
	Runtime string         `yaml:"runtime,omitempty" json:"runtime,omitempty" jsonschema:"OCI runtime: runc (default), runsc, kata..."`
	Network NetworkMode    `yaml:"network,omitempty" json:"network,omitempty" jsonschema:"none (default), egress (only the hosts in egress, through the marketplace's proxy) or bridge (open, unrestricted)"`
	// Egress lists the host:port pairs an egress worker may reach.
	Egress         []string  `yaml:"egress,omitempty" json:"egress,omitempty" jsonschema:"host:port pairs an egress worker may reach through the egress proxy, e.g. api.anthropic.com:443"`
	ReadonlyRootfs bool      `yaml:"readonly_rootfs,omitempty" json:"readonly_rootfs" jsonschema:"mount the root filesystem read-only (default true)"`
	User           string    `yaml:"user,omitempty" json:"user,omitempty" jsonschema:"uid:gid the worker runs as (default 65532:65532)"`
	Resources      Resources `yaml:"resources,omitempty" json:"resources,omitzero"`
	IdleTimeout    Duration  `yaml:"idle_timeout,omitempty" json:"idle_timeout,omitzero" jsonschema:"stop the worker after this long without actions (default 30m)"`
}

// Resources are a worker container's limits.
type Resources struct {
	CPUs   float64  `yaml:"cpus,omitempty" json:"cpus,omitempty" jsonschema:"CPU limit in cores (default 1)"`
	Memory ByteSize `yaml:"memory,omitempty" json:"memory,omitempty" jsonschema:"memory limit (default 512Mi)"`
	PIDs   int64    `yaml:"pids,omitempty" json:"pids,omitempty" jsonschema:"process limit (default 256)"`
	// Workspace and WorkspaceFiles are the workspace quota, kept by
	// meshworker (builtin workers) and mesh-exec (agent workers): Docker's
	// local volumes take no size limit.
	Workspace      ByteSize `yaml:"workspace,omitempty" json:"workspace,omitempty" jsonschema:"workspace quota in bytes (builtin and agent workers): writes past it are refused, and a command or agent run passing it is stopped (default 2Gi)"`
	WorkspaceFiles int64    `yaml:"workspace_files,omitempty" json:"workspace_files,omitempty" jsonschema:"workspace quota in files and directories (builtin and agent workers; default 200000)"`
}

// Constraints are what the gate enforces before any action runs.
type Constraints struct {
	MaxFileSize  ByteSize `yaml:"max_file_size,omitempty" json:"max_file_size,omitempty" jsonschema:"largest file a read or write may touch (default 10MB)"`
	Readonly     bool     `yaml:"readonly,omitempty" json:"readonly,omitempty" jsonschema:"refuse write and delete actions"`
	AllowedPaths []string `yaml:"allowed_paths,omitempty" json:"allowed_paths,omitempty" jsonschema:"globs anchored at the workspace root; a target must match one (default **)"`
	DeniedPaths  []string `yaml:"denied_paths,omitempty" json:"denied_paths,omitempty" jsonschema:"globs anchored at the workspace root; a target matching one is refused"`
	// Commands are argv prefixes. For go and git the gate also parses the
	// rest of the argv: only the subcommands and flags it lists pass, and
	// packages, paths and output files must be relative, without "..";
	// other programs are checked by prefix only.
	Commands   []string `yaml:"commands,omitempty" json:"commands,omitempty" jsonschema:"exec allowlist: each entry is an argv prefix written as words, e.g. 'go test'; for go and git the rest of the argv may use only the subcommands and flags the gate knows (not -vettool, -exec, -toolexec, --ext-diff, --no-index, --output, ...), and packages, paths and output files must be relative without '..'; other programs are checked by prefix only"`
	MaxActions int64    `yaml:"max_actions,omitempty" json:"max_actions,omitempty" jsonschema:"actions allowed per journey (0: no limit)"`
	// ActionTimeout bounds one action: a command (exec), an agent's task,
	// an MCP tool call. Zero: the marketplace's defaults.
	ActionTimeout Duration `yaml:"action_timeout,omitempty" json:"action_timeout,omitzero" jsonschema:"longest one action may run: a command, an agent's task or a tool call (default: 1m for a command, 4m30s for an agent's task, 5m for the rest; from 1s to 1h)"`
	MaxCostUSD    float64  `yaml:"max_cost_usd,omitempty" json:"max_cost_usd,omitempty" jsonschema:"agent spend allowed per journey in US dollars (0: no limit)"`
	Rules         []Rule   `yaml:"rules,omitempty" json:"rules,omitempty" jsonschema:"user rules in CEL"`
}

// Rule is a user policy rule written in CEL, shaped like a Kubernetes
// ValidatingAdmissionPolicy validation: the action is allowed only when
// Expression evaluates to true.
type Rule struct {
	ID                string `yaml:"id" json:"id" jsonschema:"rule id, reported as the violation's constraint_id"`
	Expression        string `yaml:"expression" json:"expression" jsonschema:"CEL boolean over action and journey; true allows the action"`
	Message           string `yaml:"message,omitempty" json:"message,omitempty" jsonschema:"message when the expression is false"`
	MessageExpression string `yaml:"messageExpression,omitempty" json:"messageExpression,omitempty" jsonschema:"CEL string expression for the message; overrides message"`
}

// AgentSpec configures a kind: agent worker.
type AgentSpec struct {
	Backend      string   `yaml:"backend" json:"backend" jsonschema:"claude, codex, opencode, gemini or command"`
	Model        string   `yaml:"model,omitempty" json:"model,omitempty" jsonschema:"model name passed to the agent CLI"`
	AllowedTools []string `yaml:"allowed_tools,omitempty" json:"allowed_tools,omitempty" jsonschema:"agent tools the CLI may use without asking"`
	SystemPrompt string   `yaml:"system_prompt,omitempty" json:"system_prompt,omitempty" jsonschema:"file, relative to the catalog, appended to the agent's system prompt"`
	MaxTurns     int      `yaml:"max_turns,omitempty" json:"max_turns,omitempty" jsonschema:"turn limit per task (0: the CLI's default)"`
}

// MCPSpec configures a kind: mcp worker.
type MCPSpec struct {
	Command []string `yaml:"command" json:"command" jsonschema:"argv of the image's MCP server on stdio"`
}
