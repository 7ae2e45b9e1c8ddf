package pipeline_test

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// architectureExample is the pipeline of the architecture document, section
// 6, verbatim.
const architectureExample = `name: research_pipeline
inputs: {task: {type: string, required: true}}
roles:
  researcher: {via: mesh, repository: research_workspace, timeout: 120000, system_prompt: prompts/researcher.md}
  writer:     {via: marketplace, worker: claude_code_assistant_v1}
  reviewer:   {via: mesh, repository: review_workspace}
nodes:
  - {id: research, role: researcher, task: "{{ .inputs.task }}"}
  - {id: write, role: writer, needs: [research], task: "Write a report from: {{ .nodes.research.output }}"}
  - id: review
    role: reviewer
    needs: [write]
    retry: {max_attempts: 3, backoff: 2s}
  - {id: revise, role: writer, needs: [review], when: "nodes.review.output.contains('CHANGES')", next: write, max_iterations: 3}
  - {id: approve, type: approval, needs: [review]}   # human-in-the-loop interrupt
`

func files(kv ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for i := 0; i+1 < len(kv); i += 2 {
		fsys[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1])}
	}
	return fsys
}

func load(src string) (*pipeline.Pipeline, error) {
	return pipeline.Load(files("p.yaml", src, "prompts/r.md", "You research.", "prompts/big.md", strings.Repeat("x", pipeline.MaxFileSize+1)), "p.yaml")
}

func mustLoad(t *testing.T, src string) *pipeline.Pipeline {
	t.Helper()
	p, err := load(src)
	if err != nil {
		t.Fatalf("Load:\n%v", err)
	}
	return p
}

func TestLoadArchitectureExample(t *testing.T) {
	t.Parallel()
	fsys := files("research.yaml", architectureExample, "prompts/researcher.md", "You are a researcher.\n")
	p, err := pipeline.Load(fsys, "research.yaml")
	if err != nil {
		t.Fatalf("the architecture's example does not load:\n%v", err)
	}
	d := p.Definition()
	if p.Name() != "research_pipeline" || p.File() != "research.yaml" || len(d.Nodes) != 5 {
		t.Fatalf("loaded %s from %s with %d nodes", p.Name(), p.File(), len(d.Nodes))
	}
	if r := d.Roles["researcher"]; r.Via != pipeline.ViaMesh || r.Timeout != 120000 || r.SystemPromptText != "You are a researcher.\n" {
		t.Errorf("researcher %+v", r)
	}
	if r, ok := p.Role("write"); !ok || r.Via != pipeline.ViaMarketplace || r.Worker != "claude_code_assistant_v1" {
		t.Errorf("Role(write) = %+v, %v", r, ok)
	}
	if _, ok := p.Role("approve"); ok {
		t.Error("an approval node has a role")
	}
	// Defaults are filled in.
	review, _ := p.Node("review")
	if review.Type != pipeline.TypeAgent || review.Retry.MaxAttempts != 3 || time.Duration(review.Retry.Backoff) != 2*time.Second ||
		time.Duration(review.Retry.MaxInterval) != pipeline.DefaultMaxInterval {
		t.Errorf("review %+v retry %+v", review, review.Retry)
	}
	if research, _ := p.Node("research"); research.Retry.MaxAttempts != 1 || time.Duration(research.Retry.Backoff) != pipeline.DefaultBackoff {
		t.Errorf("research retry %+v, want one attempt", research.Retry)
	}
	// A node without a task is given the outputs of what it needs.
	if review.Task != "{{ .nodes.write.output }}" {
		t.Errorf("review's default task %q", review.Task)
	}
	if approve, _ := p.Node("approve"); approve.Type != pipeline.TypeApproval || approve.Retry != nil {
		t.Errorf("approve %+v", approve)
	}
	if _, ok := p.Node("nope"); ok {
		t.Error("Node found an unknown id")
	}
}

// Every load error, with its exact position.
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	// Lines 1-4; nodes start at line 5, and "  - {" puts a node's first key
	// at column 6.
	const head = "name: p\ninputs: {topic: {type: string, required: true}, obj: {type: object}}\nroles: {r: {via: mesh, repository: w}}\nnodes:\n"
	const root = "  - {id: a, role: r, task: x}\n"
	tests := []struct {
		name, src, want string
	}{
		// Decoding.
		{"unknown field", "name: p\ncolour: blue\n", `p.yaml:2:1: unknown field "colour" (known: description, inputs, name, nodes, patch, roles)`},
		{"unknown node field with hint", head + "  - {id: a, role: r, task: x, neds: [b]}\n", `p.yaml:5:31: unknown field "neds" in nodes[0] (did you mean "needs"?)`},
		{"unknown role field", "name: p\nroles: {r: {via: mesh, repo: w}}\n", `p.yaml:2:24: unknown field "repo" in roles.r (known: model, repository, source, system_prompt, timeout, via, worker)`},
		{"unknown retry field", head + "  - {id: a, role: r, task: x, retry: {attempts: 2}}\n", `p.yaml:5:39: unknown field "attempts" in nodes[0].retry (known: backoff, max_attempts, max_interval)`},
		{"scalar for list", head + "  - {id: a, role: r, task: x, needs: a}\n", `p.yaml:5:38: nodes[0].needs: want a list, got "a"`},
		{"list for string", "name: [p]\n", `p.yaml:1:7: name: want a string, got a list`},
		{"bool for string", "name: true\n", `p.yaml:1:7: name: want a string, got "true"`},
		{"string for bool", "name: p\ninputs: {t: {type: string, required: \"yes\"}}\n", `p.yaml:2:38: inputs.t.required: want true or false, got "yes"`},
		{"string for int", head + "  - {id: a, role: r, task: x, max_iterations: many}\n", `p.yaml:5:47: nodes[0].max_iterations: want a whole number, got "many"`},
		{"role timeout is milliseconds", "name: p\nroles: {r: {via: mesh, repository: w, timeout: 2m}}\n", `p.yaml:2:48: roles.r.timeout: want a whole number, got "2m"`},
		{"bad duration", head + "  - {id: a, role: r, task: x, timeout: 5 minutes}\n", `p.yaml:5:40: nodes[0].timeout: invalid duration "5 minutes": want a duration such as 30s, 5m or 1h30m`},
		{"duration without unit", head + "  - {id: a, role: r, task: x, retry: {max_attempts: 2, backoff: 30}}\n", `p.yaml:5:65: nodes[0].retry.backoff: invalid duration "30": want a duration such as 30s, 5m or 1h30m`},
		{"negative duration", head + "  - {id: a, role: r, task: x, retry: {max_attempts: 2, max_interval: -1s}}\n", `p.yaml:5:70: nodes[0].retry.max_interval: invalid duration "-1s": must not be negative`},
		{"inputs not a mapping", "name: p\ninputs: [task]\n", `p.yaml:2:9: inputs: want a mapping, got a list`},
		{"not a finite default", "name: p\ninputs: {n: {type: number, default: .nan}}\n", `p.yaml:2:37: inputs.n.default: want a finite number, got ".nan"`},
		{"duplicate key", "name: p\nname: q\n", `p.yaml:2:1: duplicate key "name" (first written at line 1)`},
		{"duplicate key in a node", head + "  - id: a\n    role: r\n    id: b\n", `p.yaml:7:5: duplicate key "id" (first written at line 5)`},
		{"duplicate key in a default", "name: p\ninputs: {o: {type: object, default: {a: 1, a: 2}}}\n", `p.yaml:2:44: duplicate key "a" (first written at line 2)`},
		{"alias", head + "  - {id: a, role: r, task: &t x}\n  - {id: b, role: r, task: *t}\n", `p.yaml:6:28: nodes[1].task: aliases are not supported in pipelines; write the value out`},
		{"merge key", "name: p\nroles:\n  r:\n    <<: {via: mesh}\n", `p.yaml:4:5: roles.r: merge keys (<<) are not supported; write the keys out`},
		{"syntax error", "name: p\nnodes: [\n", "p.yaml:3:1: did not find expected node content"},
		{"tab", "name: p\nnodes:\n\t- id: a\n", "p.yaml:3:1: found character that cannot start any token (a tab: YAML is indented with spaces)"},
		{"empty file", "", `p.yaml:1:1: empty file: want a pipeline mapping`},
		{"not a mapping", "- a\n- b\n", `p.yaml:1:1: want a mapping of pipeline fields, got a list`},

		// The pipeline.
		{"missing name", "nodes: []\n", `p.yaml:1:1: missing name: every pipeline needs a name such as "research_pipeline"`},
		{"bad name", "name: Research-Pipeline\n", `p.yaml:1:7: name "Research-Pipeline" must match ^[a-z][a-z0-9_]{0,63}$`},
		{"no nodes", "name: p\n", `p.yaml:1:1: no nodes: a pipeline needs at least one node`},
		{"empty nodes", "name: p\nnodes: []\n", `p.yaml:2:8: no nodes: a pipeline needs at least one node`},

		// Inputs.
		{"bad input name", "name: p\ninputs: {Topic: {type: string}}\n", `p.yaml:2:10: input name "Topic" must match ^[a-z][a-z0-9_]{0,63}$`},
		{"reserved input name", "name: p\ninputs: {in: {type: string}}\n", `p.yaml:2:10: input name "in" is a reserved word of CEL`},
		{"input without type", "name: p\ninputs: {t: {required: true}}\n", `p.yaml:2:13: input "t": missing type: string, number, boolean, object or repository`},
		{"bad input type", "name: p\ninputs: {t: {type: int}}\n", `p.yaml:2:20: input "t": type "int" is not one of string, number, boolean, object, repository`},
		{"required with default", "name: p\ninputs: {t: {type: string, required: true, default: x}}\n", `p.yaml:2:53: input "t": a required input takes no default`},
		{"default of the wrong type", "name: p\ninputs: {n: {type: number, default: three}}\n", `p.yaml:2:37: input "n": default: want a number, got a string ("three")`},
		{"string default written as a number", "name: p\ninputs: {s: {type: string, default: 3}}\n", `p.yaml:2:37: input "s": default: want a string, got a number (3)`},
		{"object default not an object", "name: p\ninputs: {o: {type: object, default: [1]}}\n", `p.yaml:2:37: input "o": default: want an object, got a list`},

		// Roles.
		{"bad role name", "name: p\nroles: {Writer: {via: mesh, repository: w}}\n", `p.yaml:2:9: role name "Writer" must match ^[a-z][a-z0-9_]{0,63}$`},
		{"role without via", "name: p\nroles: {r: {repository: w}}\n", `p.yaml:2:12: role "r": missing via: mesh or marketplace`},
		{"bad via", "name: p\nroles: {r: {via: docker}}\n", `p.yaml:2:18: role "r": via "docker" is not one of mesh, marketplace`},
		{"mesh without repository", "name: p\nroles: {r: {via: mesh}}\n", `p.yaml:2:12: role "r": via mesh needs a repository`},
		{"mesh with worker", "name: p\nroles: {r: {via: mesh, repository: w, worker: git_v1}}\n", `p.yaml:2:47: role "r": worker is only for via marketplace`},
		{"negative timeout", "name: p\nroles: {r: {via: mesh, repository: w, timeout: -1}}\n", `p.yaml:2:48: role "r": timeout must not be negative (it is in milliseconds)`},
		{"marketplace without worker", "name: p\nroles: {r: {via: marketplace}}\n", `p.yaml:2:12: role "r": via marketplace needs a worker, the id of a marketplace worker such as "claude_code_assistant_v1"`},
		{"bad worker id", "name: p\nroles: {r: {via: marketplace, worker: claude}}\n", `p.yaml:2:39: role "r": worker "claude" is not a worker id (^[a-z][a-z0-9_]*_v[0-9]+$)`},
		{"marketplace with mesh settings", "name: p\nroles: {r: {via: marketplace, worker: git_v1, model: opus}}\n", `p.yaml:2:54: role "r": model is only for via mesh (a marketplace worker's settings are in its definition)`},
		{"system prompt missing", "name: p\nroles: {r: {via: mesh, repository: w, system_prompt: prompts/none.md}}\n", `p.yaml:2:54: role "r": system_prompt "prompts/none.md": no such file beside the pipeline`},
		{"system prompt too large", "name: p\nroles: {r: {via: mesh, repository: w, system_prompt: prompts/big.md}}\n", `p.yaml:2:54: role "r": system_prompt "prompts/big.md": file is larger than 1048576 bytes`},
		{"system prompt is a directory", "name: p\nroles: {r: {via: mesh, repository: w, system_prompt: prompts}}\n", `p.yaml:2:54: role "r": system_prompt "prompts" is a directory, not a file`},
		{"system prompt escapes", "name: p\nroles: {r: {via: mesh, repository: w, system_prompt: ../etc/passwd}}\n", `p.yaml:2:54: role "r": system_prompt "../etc/passwd" must be a clean relative path, such as prompts/researcher.md`},

		// Nodes.
		{"node without id", head + "  - {role: r, task: x}\n", `p.yaml:5:5: missing id: every node needs an id such as "research"`},
		{"bad node id", head + "  - {id: Research, role: r, task: x}\n", `p.yaml:5:10: node id "Research" must match ^[a-z][a-z0-9_]{0,63}$`},
		{"reserved node id", head + "  - {id: null_, role: r, task: x}\n  - {id: 'null', role: r, task: x}\n", `p.yaml:6:10: node id "null" is a reserved word of CEL`},
		{"duplicate node id", head + root + "  - {id: a, role: r, task: y}\n", `p.yaml:6:10: duplicate node id "a" (first at line 5)`},
		{"bad node type", head + "  - {id: a, type: human}\n", `p.yaml:5:19: node "a": type "human" is not one of agent, approval`},
		{"agent without role", head + "  - {id: a, task: x}\n", `p.yaml:5:5: node "a": missing role (roles: r)`},
		{"unknown role", head + "  - {id: a, role: writer, task: x}\n", `p.yaml:5:19: node "a": unknown role "writer" (roles: r)`},
		{"root without task", head + "  - {id: a, role: r}\n", `p.yaml:5:5: node "a": missing task: a node that needs nothing has no outputs to work from`},
		{"foreach without task", head + root + "  - {id: b, role: r, needs: [a], foreach: '[1]'}\n", `p.yaml:6:5: node "b": a foreach node needs a task (each item is .item in it)`},
		{"approval with role", head + root + "  - {id: b, type: approval, needs: [a], role: r}\n", `p.yaml:6:47: node "b": approval nodes take no role`},
		{"approval with task", head + root + "  - {id: b, type: approval, needs: [a], task: ok?}\n", `p.yaml:6:47: node "b": approval nodes take no task`},
		{"approval with retry", head + root + "  - {id: b, type: approval, needs: [a], retry: {max_attempts: 2}}\n", `p.yaml:6:48: node "b": approval nodes take no retry`},
		{"approver with a space", head + root + "  - {id: b, type: approval, needs: [a], approvers: [\"bo b\"]}\n", `p.yaml:6:53: node "b": approver "bo b" is not a caller name (no spaces)`},
		{"approvers on an agent node", head + root + "  - {id: b, role: r, needs: [a], approvers: [bob]}\n", `p.yaml:6:45: node "b": only approval nodes take approvers`},
		{"approval with foreach", head + root + "  - {id: b, type: approval, needs: [a], foreach: '[1]'}\n", `p.yaml:6:50: node "b": approval nodes take no foreach`},
		{"needs unknown node", head + root + "  - {id: b, role: r, needs: [a, c]}\n", `p.yaml:6:33: node "b": needs unknown node "c"`},
		{"needs twice", head + root + "  - {id: b, role: r, needs: [a, a]}\n", `p.yaml:6:33: node "b": needs "a" twice`},
		{"retry without attempts", head + "  - {id: a, role: r, task: x, retry: {backoff: 1s}}\n", `p.yaml:5:38: node "a": retry needs max_attempts of at least 1`},
		{"retry max_interval below backoff", head + "  - {id: a, role: r, task: x, retry: {max_attempts: 2, backoff: 1m, max_interval: 10s}}\n", `p.yaml:5:83: node "a": retry.max_interval (10s) must be at least retry.backoff (1m0s)`},
		{"max_concurrency without foreach", head + "  - {id: a, role: r, task: x, max_concurrency: 2}\n", `p.yaml:5:48: node "a": max_concurrency is only for foreach nodes`},
		{"negative max_concurrency", head + "  - {id: a, role: r, task: x, foreach: '[1]', max_concurrency: -1}\n", `p.yaml:5:64: node "a": max_concurrency must be at least 1`},

		// The graph.
		{"needs cycle", head + root + "  - {id: b, role: r, needs: [a, c]}\n  - {id: c, role: r, needs: [b]}\n", `p.yaml:6:33: needs cycle: b needs c needs b (only next may loop, bounded by max_iterations)`},
		{"needs itself", head + root + "  - {id: b, role: r, needs: [b]}\n", `p.yaml:6:30: needs cycle: b needs b (only next may loop, bounded by max_iterations)`},
		{"unreachable", head + root + "  - {id: b, role: r, needs: [c]}\n  - {id: c, role: r, needs: [b]}\n  - {id: d, role: r, needs: [c]}\n", `p.yaml:8:10: node "d" is unreachable: no root (a node without needs) leads to it through needs or next`},
		{"next without max_iterations", head + root + "  - {id: b, role: r, needs: [a], next: a}\n", `p.yaml:6:40: node "b": next "a" loops without a bound: add max_iterations`},
		{"max_iterations without next", head + "  - {id: a, role: r, task: x, max_iterations: 3}\n", `p.yaml:5:47: node "a": max_iterations is only for nodes with next`},
		{"negative max_iterations", head + "  - {id: a, role: r, task: x, next: a, max_iterations: -1}\n", `p.yaml:5:56: node "a": max_iterations must be at least 1`},
		{"next unknown", head + "  - {id: a, role: r, task: x, next: z, max_iterations: 2}\n", `p.yaml:5:37: node "a": next names unknown node "z"`},
		{"next forward", head + root + "  - {id: b, role: r, needs: [a]}\n  - {id: c, role: r, needs: [a], next: b, max_iterations: 2}\n", `p.yaml:7:40: node "c": next "b" must be "c" itself or one of its ancestors through needs: next loops back (edges forward are needs)`},
		{"too many nodes", head + strings.Repeat(root, pipeline.MaxNodes+1), `p.yaml:5:3: 1001 nodes are more than the 1000 a pipeline may have`},

		// CEL.
		{"when syntax", head + "  - {id: a, role: r, task: x, when: 'inputs.topic =='}\n", `p.yaml:5:37: node "a": when: invalid CEL: 1:16: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}`},
		{"when empty", head + "  - {id: a, role: r, task: x, when: ' '}\n", `p.yaml:5:37: node "a": when: empty expression`},
		{"when not bool", head + "  - {id: a, role: r, task: x, when: 'size(inputs)'}\n", `p.yaml:5:37: node "a": when must evaluate to bool, not int`},
		// A node's state is the API's type (api.NodeState), and CEL names it so.
		{"when a node's state", head + root + "  - {id: b, role: r, task: x, needs: [a], when: 'nodes.a'}\n", `p.yaml:6:49: node "b": when must evaluate to bool, not api.NodeState`},
		{"when unknown variable", head + "  - {id: a, role: r, task: x, when: 'run.ok'}\n", `p.yaml:5:37: node "a": when: invalid CEL: 1:1: undeclared reference to 'run'`},
		{"when unknown input", head + "  - {id: a, role: r, task: x, when: 'inputs.topc == \"\"'}\n", `p.yaml:5:37: node "a": when: unknown input "topc" (inputs: obj, topic)`},
		{"when unknown input by index", head + "  - {id: a, role: r, task: x, when: 'inputs[\"topc\"] == \"\"'}\n", `p.yaml:5:37: node "a": when: unknown input "topc" (inputs: obj, topic)`},
		{"when unknown node", head + root + "  - {id: b, role: r, needs: [a], when: 'nodes.z.status == \"failed\"'}\n", `p.yaml:6:40: node "b": when: unknown node "z"`},
		{"when unknown node state field", head + root + "  - {id: b, role: r, needs: [a], when: 'nodes.a.outptu == \"\"'}\n", `p.yaml:6:40: node "b": when: invalid CEL: 1:8: undefined field 'outptu'`},
		{"when on a node that is not an ancestor", head + root + "  - {id: b, role: r, needs: [a]}\n  - {id: c, role: r, needs: [a], when: 'nodes.b.attempts > 1'}\n", `p.yaml:7:40: node "c": when: nodes.b: "b" is not an ancestor of "c" through needs, so its state may not exist yet`},
		{"foreach not a list", head + "  - {id: a, role: r, task: x, foreach: 'inputs.topic.size()'}\n", `p.yaml:5:40: node "a": foreach must evaluate to a list, not int`},
		{"foreach template", head + "  - {id: a, role: r, task: '{{ .item }}', foreach: '{{ .nodes.a.output }}'}\n", `p.yaml:5:52: node "a": foreach: .nodes.a.output: "a" is not an ancestor of "a" through needs, so its output may not exist yet`},

		// Templates.
		{"template syntax", head + "  - {id: a, role: r, task: '{{ .inputs.topic '}\n", `p.yaml:5:28: node "a": task: invalid template: line 1: unclosed action`},
		{"template function", head + "  - {id: a, role: r, task: '{{ upper .inputs.topic }}'}\n", `p.yaml:5:28: node "a": task: invalid template: line 1: function "upper" not defined`},
		{"template unknown input", head + "  - {id: a, role: r, task: 'About {{ .inputs.topc }}'}\n", `p.yaml:5:28: node "a": task: .inputs.topc: unknown input "topc" (inputs: obj, topic)`},
		{"template field of a string input", head + "  - {id: a, role: r, task: '{{ .inputs.topic.title }}'}\n", `p.yaml:5:28: node "a": task: .inputs.topic.title: input "topic" is a string, which has no fields`},
		{"template all inputs", head + "  - {id: a, role: r, task: '{{ range .inputs }}{{ . }}{{ end }}'}\n", `p.yaml:5:28: node "a": task: .inputs: name one input, as .inputs.<name>`},
		{"template whole data", head + "  - {id: a, role: r, task: '{{ . }}'}\n", `p.yaml:5:28: node "a": task: .: use .inputs.<name> or .nodes.<id>.output, not the whole data`},
		{"template unknown field", head + "  - {id: a, role: r, task: '{{ .input.topic }}'}\n", `p.yaml:5:28: node "a": task: .input.topic: unknown field "input": templates use .inputs.<name> and .nodes.<id>.output`},
		{"template unknown node", head + root + "  - {id: b, role: r, needs: [a], task: '{{ .nodes.z.output }}'}\n", `p.yaml:6:40: node "b": task: .nodes.z.output: unknown node "z"`},
		{"template node status", head + root + "  - {id: b, role: r, needs: [a], task: '{{ .nodes.a.status }}'}\n", `p.yaml:6:40: node "b": task: .nodes.a.status: only a node's output or patch can be used, as .nodes.a.output or .nodes.a.patch`},
		{"template all nodes", head + root + "  - {id: b, role: r, needs: [a], task: '{{ index .nodes \"a\" \"output\" }}'}\n", `p.yaml:6:40: node "b": task: .nodes: name one node's output, as .nodes.<id>.output`},
		{"template node not an ancestor", head + root + "  - {id: b, role: r, needs: [a], task: x}\n  - {id: c, role: r, needs: [a], task: '{{ .nodes.b.output }}'}\n", `p.yaml:7:40: node "c": task: .nodes.b.output: "b" is not an ancestor of "c" through needs, so its output may not exist yet`},
		{"template root variable", head + root + "  - {id: b, role: r, needs: [a], task: '{{ with .inputs.obj }}{{ $.nodes.b.output }}{{ end }}'}\n", `p.yaml:6:40: node "b": task: $.nodes.b.output: "b" is not an ancestor of "b" through needs, so its output may not exist yet`},
		{"template chain", head + "  - {id: a, role: r, task: '{{ (.inputs).topc }}'}\n", `p.yaml:5:28: node "a": task: (.inputs).topc: unknown input "topc" (inputs: obj, topic)`},
		{"template else sees the data", head + "  - {id: a, role: r, task: '{{ with .inputs.obj }}{{ .x }}{{ else }}{{ .inputs.nope }}{{ end }}'}\n", `p.yaml:5:28: node "a": task: .inputs.nope: unknown input "nope" (inputs: obj, topic)`},
		{"template item outside foreach", head + "  - {id: a, role: r, task: '{{ .item }}'}\n", `p.yaml:5:28: node "a": task: .item: only the task of a foreach node has .item and .index`},
		{"template result in a task", head + "  - {id: a, role: r, task: '{{ .result }}'}\n", `p.yaml:5:28: node "a": task: .result: only an output template has .result`},
		{"template calls a template", head + "  - {id: a, role: r, task: '{{ template \"x\" }}'}\n", `p.yaml:5:28: node "a": task: {{template}} is not supported in pipelines`},
		{"template defines a template", head + "  - {id: a, role: r, task: '{{ define \"x\" }}y{{ end }}z'}\n", `p.yaml:5:28: node "a": task: {{define}} and {{block}} are not supported in pipelines`},
		{"output template references itself", head + "  - {id: a, role: r, task: x, output: '{{ .nodes.a.output }}'}\n", `p.yaml:5:39: node "a": output: .nodes.a.output: "a" is not an ancestor of "a" through needs, so its output may not exist yet`},
		// Sources, commands and patches (the coding loop).
		{"optional repository input", "name: p\ninputs: {repo: {type: repository}}\n", `p.yaml:2:16: input "repo": a repository input must be required (a workspace seeded from nothing needs no source)`},
		{"source on a mesh role", "name: p\ninputs: {repo: {type: repository, required: true}}\nroles: {r: {via: mesh, repository: x, source: {input: repo}}}\nnodes: [{id: a, role: r, task: x}]\n", `p.yaml:3:47: role "r": source is only for via marketplace (a mesh role works in its repository)`},
		{"source input not a repository", "name: p\ninputs: {t: {type: string}}\nroles: {r: {via: marketplace, worker: w_v1, source: {input: t}}}\nnodes: [{id: a, role: r, task: x}]\n", `p.yaml:3:61: role "r": source.input "t" is not an input of type repository (inputs: t)`},
		{"source with both", "name: p\ninputs: {repo: {type: repository, required: true}}\nroles: {r: {via: marketplace, worker: w_v1}}\nnodes: [{id: a, role: r, task: x, source: {input: repo, from: a}}]\n", `p.yaml:4:43: node "a": source takes exactly one of input (a repository input) or from (a node)`},
		{"source from a non-ancestor", "name: p\ninputs: {repo: {type: repository, required: true}}\nroles: {r: {via: marketplace, worker: w_v1, source: {input: repo}}}\nnodes:\n  - {id: a, role: r, task: x}\n  - {id: b, role: r, task: x, source: {from: a}}\n", `p.yaml:6:46: node "b": source.from "a" is not an ancestor through needs, so its patch may not exist yet`},
		{"source from a node without a source", "name: p\ninputs: {repo: {type: repository, required: true}}\nroles: {r: {via: marketplace, worker: w_v1}, s: {via: marketplace, worker: w_v1, source: {input: repo}}}\nnodes:\n  - {id: a, role: r, task: x}\n  - {id: b, role: s, needs: [a], task: x, source: {from: a}}\n", `p.yaml:6:58: node "b": source.from "a": that node's role has no source, so it has no patch`},
		{"command and task", "name: p\nroles: {r: {via: marketplace, worker: w_v1}}\nnodes: [{id: a, role: r, task: x, command: [go, test]}]\n", `p.yaml:3:44: node "a": a node runs a command or a task, not both`},
		{"command on a mesh role", "name: p\nroles: {r: {via: mesh, repository: x}}\nnodes: [{id: a, role: r, command: [go, test]}]\n", `p.yaml:3:35: node "a": command is only for roles via marketplace`},
		{"patch of a node without a source", "name: p\nroles: {r: {via: marketplace, worker: w_v1}}\nnodes: [{id: a, role: r, task: x}]\npatch: a\n", `p.yaml:4:8: patch: node "a" has no source, so it has no patch`},
		{"patch of the node itself", "name: p\ninputs: {repo: {type: repository, required: true}}\nroles: {r: {via: marketplace, worker: w_v1, source: {input: repo}}}\nnodes: [{id: a, role: r, task: '{{ .nodes.a.patch }}'}]\n", `p.yaml:4:32: node "a": task: .nodes.a.patch: "a" is not an ancestor of "a" through needs, so its output may not exist yet`},
		{"output template with a bad field of result", head + "  - {id: a, role: r, task: x, output: '{{ .result.text }}'}\n", `p.yaml:5:39: node "a": output: .result.text: .result is a string, which has no fields`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := load(tt.src)
			var es pipeline.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("got %v, want pipeline.Errors", err)
			}
			for _, e := range es {
				if e.File != "p.yaml" || e.Line < 1 || e.Column < 1 || e.Msg == "" {
					t.Errorf("error without a position: %#v", e)
				}
			}
			if !strings.Contains("\n"+err.Error()+"\n", "\n"+tt.want) {
				t.Errorf("got\n%v\nwant the line\n%s", err, tt.want)
			}
		})
	}
}

// Templates may use what their scope gives them.
func TestLoadAcceptsReferences(t *testing.T) {
	t.Parallel()
	const head = "name: p\ninputs: {topic: {type: string, required: true}, obj: {type: object}}\nroles: {r: {via: mesh, repository: w}}\nnodes:\n  - {id: a, role: r, task: x}\n  - {id: b, role: r, needs: [a], task: y}\n"
	for _, node := range []string{
		`{id: c, role: r, needs: [b], task: '{{ .nodes.a.output }} {{ .nodes.b.output }} {{ .inputs.topic }} {{ $.inputs.topic }}'}`,
		`{id: c, role: r, needs: [b], task: '{{ with .inputs.obj }}{{ .anything.deep }}{{ end }}{{ (.inputs.obj).x }}{{ .inputs.obj.y }}'}`,
		`{id: c, role: r, needs: [b], task: '{{ range $k, $v := .inputs.obj }}{{ $k }}={{ $v }} {{ . }}{{ end }}'}`,
		`{id: c, role: r, needs: [b], task: '{{ if eq .inputs.topic "x" }}{{ printf "%s" .nodes.a.output }}{{ else }}{{ len .inputs.topic }}{{ end }}'}`,
		`{id: c, role: r, needs: [b], foreach: 'inputs.obj.items', task: '{{ .index }}: {{ .item }} {{ .item.name }}', max_concurrency: 4}`,
		`{id: c, role: r, needs: [b], foreach: '{{ .nodes.b.output }}', task: '{{ .item }}'}`,
		`{id: c, role: r, needs: [b], output: '{{ .result }} from {{ .nodes.a.output }}'}`,
		`{id: c, role: r, needs: [b], when: 'has(nodes.c) || nodes.a.status == "succeeded" && inputs["topic"] != "" && nodes["b"].attempts < 3'}`,
		`{id: c, role: r, needs: [b], when: 'nodes.exists(k, nodes[k].iteration > 2) || inputs.obj.x == 1'}`,
		`{id: c, role: r, needs: [b], when: 'inputs.topic.lowerAscii().contains("go")'}`,
		`{id: c, type: approval, needs: [b], output: 'approved: {{ .result }}'}`,
		`{id: c, role: r, needs: [b], next: a, max_iterations: 2}`,
		`{id: c, role: r, needs: [b], next: c, max_iterations: 2}`,
	} {
		if _, err := load(head + "  - " + node + "\n"); err != nil {
			t.Errorf("%s:\n%v", node, err)
		}
	}
}

// Every problem of a file is reported at once, in position order.
func TestLoadReportsEveryError(t *testing.T) {
	t.Parallel()
	_, err := load(`name: p
roles: {r: {via: mesh}}
nodes:
  - {id: a, role: w, task: "{{ .inputs.x }}"}
  - {id: a, role: r, needs: [z], task: y}
  - {id: c, type: approval, needs: [a], next: c}
`)
	want := `p.yaml:2:12: role "r": via mesh needs a repository
p.yaml:4:19: node "a": unknown role "w" (roles: r)
p.yaml:4:28: node "a": task: .inputs.x: unknown input "x" (the pipeline has no inputs)
p.yaml:5:10: duplicate node id "a" (first at line 4)
p.yaml:5:30: node "a": needs unknown node "z"
p.yaml:6:47: node "c": next "c" loops without a bound: add max_iterations`
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

// Graph problems are reported where they are, not again at every node they
// affect.
func TestLoadReportsCausesOnce(t *testing.T) {
	t.Parallel()
	const head = "name: p\nroles: {r: {via: mesh, repository: w}}\nnodes:\n"
	for src, want := range map[string]string{
		head + "  - {id: a, role: r, task: x}\n  - {id: b, role: r, needs: [z], task: '{{ .nodes.a.output }}'}\n  - {id: c, role: r, needs: [b], when: 'nodes.a.output == \"\"'}\n":   `p.yaml:5:30: node "b": needs unknown node "z"`,
		head + "  - {id: a, role: r, needs: [b]}\n  - {id: b, role: r, needs: [a], task: '{{ .nodes.a.output }}'}\n":                                                                  `p.yaml:4:30: needs cycle: a needs b needs a (only next may loop, bounded by max_iterations)`,
		head + "  - {id: a, role: r, task: x}\n  - {id: b, role: r, needs: [a, c]}\n  - {id: c, role: r, needs: [b]}\n  - {id: d, role: r, needs: [c], next: d, max_iterations: 1}\n": `p.yaml:5:33: needs cycle: b needs c needs b (only next may loop, bounded by max_iterations)`,
	} {
		if _, err := load(src); err == nil || err.Error() != want {
			t.Errorf("got\n%v\nwant\n%s", err, want)
		}
	}
}

func TestLoadReadsSystemPromptsBesideTheFile(t *testing.T) {
	t.Parallel()
	fsys := files(
		"team/p.yaml", "name: p\nroles: {r: {via: mesh, repository: w, system_prompt: prompts/r.md, model: sonnet}}\nnodes:\n  - {id: a, role: r, task: x}\n",
		"team/prompts/r.md", "Be brief.",
	)
	p, err := pipeline.Load(fsys, "team/p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := p.Role("a"); r.SystemPrompt != "prompts/r.md" || r.SystemPromptText != "Be brief." || r.Model != "sonnet" {
		t.Errorf("role %+v", r)
	}
}

func TestLoadRefusesHugeFiles(t *testing.T) {
	t.Parallel()
	_, err := load("name: p\ndescription: " + strings.Repeat("x", pipeline.MaxFileSize) + "\n")
	if err == nil || err.Error() != "p.yaml:1:1: file is larger than 1048576 bytes" {
		t.Errorf("got %v", err)
	}
	_, err = pipeline.Load(files(), "missing.yaml")
	if err == nil || !strings.HasPrefix(err.Error(), "missing.yaml:1:1: open missing.yaml: ") {
		t.Errorf("got %v", err)
	}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	const one = "name: one\nroles: {r: {via: mesh, repository: w}}\nnodes: [{id: a, role: r, task: x}]\n"
	const two = "name: two\nroles: {r: {via: marketplace, worker: git_v1}}\nnodes: [{id: a, role: r, task: x}]\n"
	cat, err := pipeline.LoadDir(files("one.yaml", one, "two.yml", two, "notes.txt", "not a pipeline", "sub/three.yaml", "name: [broken"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range cat.Pipelines() {
		names = append(names, p.Name()+"@"+p.File())
	}
	if strings.Join(names, " ") != "one@one.yaml two@two.yml" {
		t.Errorf("catalog %v", names)
	}
	if p, ok := cat.Lookup("two"); !ok || p.Name() != "two" {
		t.Error("Lookup(two) failed")
	}
	if _, ok := cat.Lookup("three"); ok {
		t.Error("Lookup found a pipeline that does not exist")
	}

	// Every file's errors, and names unique across files.
	_, err = pipeline.LoadDir(files("a.yaml", one, "b.yaml", "name: one\nroles: {r: {via: mesh, repository: w}}\nnodes: [{id: a, role: r, task: y}]\n", "c.yaml", "name: c\nbogus: 1\n"))
	want := "b.yaml:1:7: duplicate pipeline name \"one\": already defined in a.yaml\nc.yaml:2:1: unknown field \"bogus\" (known: description, inputs, name, nodes, patch, roles)"
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}
