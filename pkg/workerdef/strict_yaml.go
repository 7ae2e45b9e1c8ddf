package workerdef

import (
	"bytes"
	"reflect"

	"go.yaml.in/yaml/v4"
)

// format names a strict YAML format in the messages its decoding produces.
type format struct {
	document  string // "empty file: want a <document> mapping"
	fields    string // "want a mapping of <fields> fields"; also names the root in messages
	aliasHint string // ends "aliases are not supported"
	mergeHint string // ends "merge keys (<<) are not supported"
}

var workerFormat = format{
	document:  "worker definition",
	fields:    "definition",
	aliasHint: " in worker definitions; use extends to share settings",
	mergeHint: "; use extends",
}

// loadDocument parses data, the text of file, as one YAML document whose root
// is a mapping.
func (f *format) loadDocument(file string, data []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if len(bytes.TrimSpace(data)) > 0 {
		if err := yaml.Load(data, &doc); err != nil {
			return nil, yamlError(file, data, err)
		}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &Error{File: file, Line: 1, Column: 1, Msg: "empty file: want a " + f.document + " mapping"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Column: root.Column, Msg: "want a mapping of " + f.fields + " fields, got " + kindName(root)}
	}
	return root, nil
}

// DecodeYAML decodes data, the text of file, strictly into v as [Load]
// decodes a worker definition, for the project's other YAML formats (the
// orchestrator's pipelines). document names the format in messages, such as
// "pipeline".
//
// data must hold one YAML document whose root is a mapping, and v must point
// to a struct whose fields carry yaml tags. Fields may be strings, booleans,
// int, int64, float64, [encoding.TextUnmarshaler] scalars, pointers, structs,
// slices, maps with string keys, and any (which receives nil, bool, int64,
// float64, string, []any or map[string]any). Unknown fields (with a "did you
// mean"), wrong types, duplicate keys, aliases and merge keys are refused.
//
// DecodeYAML returns the node every written value was decoded from, by field
// path ("" for the root, "name", "nodes[2].retry.backoff", "roles.writer"),
// so that the caller's own checks can point at the value. On failure the
// error is an [Errors] listing every problem as file:line:col: message, in
// the order they were written.
func DecodeYAML(file string, data []byte, document string, v any) (map[string]*yaml.Node, error) {
	f := &format{
		document:  document,
		fields:    document,
		aliasHint: " in " + document + "s; write the value out",
		mergeHint: "; write the keys out",
	}
	root, err := f.loadDocument(file, data)
	if err != nil {
		return nil, err
	}
	origin := map[*yaml.Node]string{}
	var mark func(*yaml.Node)
	mark = func(n *yaml.Node) {
		origin[n] = file
		for _, c := range n.Content {
			mark(c)
		}
	}
	mark(root)
	dec := &strictDecoder{format: f, origin: origin, positions: map[string]*yaml.Node{}}
	dec.decode(root, reflect.ValueOf(v).Elem(), "")
	if len(dec.errs) > 0 {
		return dec.positions, dec.errs
	}
	return dec.positions, nil
}
