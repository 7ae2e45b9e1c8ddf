// Package pipeline is the orchestrator's pipeline format: the YAML a pipeline
// is written in, its loading and validation, and the pure functions the engine
// runs a pipeline with.
//
// A pipeline names its inputs, the roles that do the work (a repository
// behind mesh-exec's mesh_execute, or a worker of the marketplace) and a graph
// of nodes:
//
//	name: research_pipeline
//	inputs: {task: {type: string, required: true}}
//	roles:
//	  researcher: {via: mesh, repository: research_workspace, timeout: 120000}
//	  writer:     {via: marketplace, worker: claude_code_assistant_v1}
//	nodes:
//	  - {id: research, role: researcher, task: "{{ .inputs.task }}"}
//	  - {id: write, role: writer, needs: [research], task: "Report on: {{ .nodes.research.output }}"}
//	  - {id: approve, type: approval, needs: [write]}
//
// Edges are written as needs, GitHub Actions style: a node runs once every
// node it needs has finished, and a node that needs nothing is a root. The
// needs graph must be acyclic; the one way to loop is next, which sends the
// run back to the node itself or to one of its ancestors, at most
// max_iterations times. when is a CEL condition over the run state, foreach
// fans a node out over a list, and task and output are Go text/template
// templates over the inputs and the outputs of the node's ancestors.
//
// Loading is strict. [Load] and [LoadDir] report every problem at once as
// "file:line:col: message" ([Errors]), in two passes: decoding (with the
// strict decoder of package workerdef) refuses unknown fields, wrong types,
// bad durations, duplicate keys and YAML aliases; a file that decodes is then
// validated: unknown roles and nodes, needs cycles, unbounded loops,
// unreachable nodes, CEL that does not compile or type-check, and templates
// that reference an undeclared input or a node that is not an ancestor, so
// that a run never fails on a reference it could have been refused for at
// load time.
//
// A loaded [Pipeline] is immutable. Its methods ([Pipeline.EvalWhen],
// [Pipeline.ForeachItems], [Pipeline.RenderTask], [Pipeline.RenderOutput],
// [Pipeline.CheckInputs]) are pure functions of their arguments, safe for
// concurrent use, and [Pipeline.Hash] identifies the definition, so that a
// resumed run can refuse a pipeline that changed under it.
package pipeline
