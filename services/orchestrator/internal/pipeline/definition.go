package pipeline

import (
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// Definition is a pipeline as written in its YAML file. After [Load] it holds
// the effective values: every default of the format is filled in, so the
// engine reads settings from here rather than re-deriving them.
type Definition struct {
	// Name identifies the pipeline in a catalog: ^[a-z][a-z0-9_]*$.
	Name string `yaml:"name" json:"name"`
	// Description says what the pipeline is for. Optional.
	Description string `yaml:"description" json:"description,omitempty"`
	// Inputs are the values a run is started with, by name.
	Inputs map[string]Input `yaml:"inputs" json:"inputs,omitempty"`
	// Roles are who does the work of agent nodes, by name.
	Roles map[string]Role `yaml:"roles" json:"roles,omitempty"`
	// Nodes are the steps of the graph, in file order.
	Nodes []Node `yaml:"nodes" json:"nodes"`
	// Patch names the node whose patch is the run's patch (what
	// `meshctl runs patch` prints): a node of a role with a source. Optional;
	// without it, the last such node in file order.
	Patch string `yaml:"patch" json:"patch,omitempty"`
}

// InputType is the type of an input's value: the API's, named as in JSON
// Schema. TypeRepository is a workspace source for marketplace roles, as
// spawn_worker takes it: {"git": {"url", "ref", "depth"}} or
// {"archive": {"tar_gz_base64", "sha256"}}.
type InputType = api.InputType

// The input types.
const (
	TypeString     = api.TypeString
	TypeNumber     = api.TypeNumber
	TypeBoolean    = api.TypeBoolean
	TypeObject     = api.TypeObject
	TypeRepository = api.TypeRepository
)

var inputTypes = []InputType{TypeString, TypeNumber, TypeBoolean, TypeObject, TypeRepository}

// Input declares one input of a run.
type Input struct {
	// Type is string, number, boolean, object or repository. Required.
	Type InputType `yaml:"type" json:"type"`
	// Required inputs must be given when a run starts; they take no default.
	Required bool `yaml:"required" json:"required,omitempty"`
	// Default is the value of an optional input that was not given. An
	// optional input without a default takes its type's zero value ("", 0,
	// false or {}), so that every declared input is always present.
	Default any `yaml:"default" json:"default,omitempty"`
	// Description says what the input is for. Optional.
	Description string `yaml:"description" json:"description,omitempty"`
}

// Via is how a role's work is done.
type Via string

// The ways a role can work.
const (
	// ViaMesh calls mesh-exec's mesh_execute on a repository.
	ViaMesh Via = "mesh"
	// ViaMarketplace runs actions in a worker of the marketplace catalog.
	ViaMarketplace Via = "marketplace"
)

// Role is who does the work of the nodes that name it. Every node of a role
// continues the role's one agent session.
type Role struct {
	// Via is mesh or marketplace. Required.
	Via Via `yaml:"via" json:"via"`
	// Repository is the repository mesh_execute runs in. Required for via
	// mesh, and only for it.
	Repository string `yaml:"repository" json:"repository,omitempty"`
	// Timeout is mesh_execute's timeout in milliseconds, for via mesh only.
	// 0 leaves mesh-exec's own default.
	Timeout int64 `yaml:"timeout" json:"timeout,omitempty"`
	// SystemPrompt is a file, relative to the pipeline's file, holding the
	// role's system prompt; via mesh only (a marketplace worker's prompt is
	// part of its definition). Optional.
	SystemPrompt string `yaml:"system_prompt" json:"system_prompt,omitempty"`
	// SystemPromptText is the content of SystemPrompt, read by Load.
	SystemPromptText string `yaml:"-" json:"system_prompt_text,omitempty"`
	// Model is the agent's model, for via mesh only. Optional.
	Model string `yaml:"model" json:"model,omitempty"`
	// Worker is the id of the marketplace worker, such as
	// claude_code_assistant_v1. Required for via marketplace, and only for it.
	Worker string `yaml:"worker" json:"worker,omitempty"`
	// Source seeds the role's workspace, for via marketplace only: the
	// pipeline's repository (an input), or another node's base plus its
	// patch. A node's own source overrides it. Optional.
	Source *Source `yaml:"source" json:"source,omitempty"`
}

// Source is where a marketplace role's workspace comes from: exactly one of
// Input (an input of type repository, seeding the role's journey when it is
// first spawned) or From (a node whose base plus patch seed the workspace
// afresh each time the node runs).
type Source struct {
	Input string `yaml:"input" json:"input,omitempty"`
	From  string `yaml:"from" json:"from,omitempty"`
}

// NodeType is what a node does.
type NodeType string

// The node types.
const (
	// TypeAgent gives the node's task to its role. The default.
	TypeAgent NodeType = "agent"
	// TypeApproval interrupts the run until a human resumes it with a value,
	// which becomes the node's output.
	TypeApproval NodeType = "approval"
)

// Node is one step of a pipeline.
type Node struct {
	// ID names the node: ^[a-z][a-z0-9_]*$, unique in the pipeline.
	ID string `yaml:"id" json:"id"`
	// Role names the role that does an agent node's work. Required for agent
	// nodes; approval nodes take none.
	Role string `yaml:"role" json:"role,omitempty"`
	// Type is agent (the default) or approval.
	Type NodeType `yaml:"type" json:"type"`
	// Task is the text/template of what the role is asked to do, over
	// .inputs.<name>, .nodes.<ancestor>.output, and for foreach nodes .item
	// and .index. Without a task, an agent node is given the outputs of the
	// nodes it needs, in needs order, separated by blank lines. Approval
	// nodes take no task.
	Task string `yaml:"task" json:"task,omitempty"`
	// Needs lists the nodes that must finish before this one runs.
	Needs []string `yaml:"needs" json:"needs,omitempty"`
	// When is a CEL condition over the run state (inputs, nodes); a node
	// whose condition is false is skipped. Empty means always.
	When string `yaml:"when" json:"when,omitempty"`
	// Retry says how often a failed attempt is tried again. Load fills it in
	// on every agent node; without a retry block a node is tried once.
	// Approval nodes take none.
	Retry *Retry `yaml:"retry" json:"retry,omitempty"`
	// Timeout bounds one attempt of the node. 0 means no bound beyond the
	// role's own.
	Timeout meshtype.Duration `yaml:"timeout" json:"timeout,omitzero"`
	// Foreach fans the node out, one run of its task per item: a CEL
	// expression that evaluates to a list, or, when it contains "{{", a
	// template whose non-empty lines are the items.
	Foreach string `yaml:"foreach" json:"foreach,omitempty"`
	// MaxConcurrency bounds how many items of a foreach run at once; only
	// with foreach. Defaults to 1.
	MaxConcurrency int `yaml:"max_concurrency" json:"max_concurrency,omitempty"`
	// Next names a node to run again after this one: the node itself or one
	// of its ancestors. It is the only way to make a cycle, and needs
	// MaxIterations.
	Next string `yaml:"next" json:"next,omitempty"`
	// MaxIterations bounds how many times Next is followed in one run.
	MaxIterations int `yaml:"max_iterations" json:"max_iterations,omitempty"`
	// Source overrides the role's source for this node. Optional.
	Source *Source `yaml:"source" json:"source,omitempty"`
	// Command runs a command (argv, no shell) in the role's worker instead
	// of a task: an exec action, for builtin workers such as shell_v1. The
	// node's output is "exit_code: N" on its first line, then the command's
	// output. Via marketplace only; not with task or foreach.
	Command []string `yaml:"command" json:"command,omitempty"`
	// Output is an optional text/template, rendered when the node succeeds,
	// whose text becomes the node's output instead of the raw result. It
	// sees what the task sees, and .result, the raw result.
	Output string `yaml:"output" json:"output,omitempty"`
	// Approvers, on an approval node, are the callers who may decide it:
	// only they resume it, whoever started the run. Empty means the run's
	// caller (and admins).
	Approvers []string `yaml:"approvers" json:"approvers,omitempty"`
}

// IsForeach reports whether the node fans out over items.
func (n *Node) IsForeach() bool { return n.Foreach != "" }
