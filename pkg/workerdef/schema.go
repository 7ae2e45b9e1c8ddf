package workerdef

import (
	"encoding/json"
	"reflect"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// SchemaID is the $id of the definition format's JSON Schema.
const SchemaID = "https://meshwork.dev/schemas/worker.schema.json"

// TypeSchemas are the schemas of the definition's own value types, as
// their JSON and YAML forms are written (a duration is text such as "30m";
// a size is a number of bytes or text such as "10MB"), for any schema that
// holds a definition (jsonschema.ForOptions.TypeSchemas).
func TypeSchemas() map[reflect.Type]*jsonschema.Schema {
	str := func(enum ...any) *jsonschema.Schema {
		return &jsonschema.Schema{Type: "string", Enum: enum}
	}
	return map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[meshtype.Kind]():           str("builtin", "agent", "mcp"),
		reflect.TypeFor[meshtype.IsolationLevel](): str("container", "process"),
		reflect.TypeFor[meshtype.NetworkMode]():    str("none", "egress", "bridge"),
		reflect.TypeFor[meshtype.ByteSize](): {OneOf: []*jsonschema.Schema{
			{Type: "integer", Minimum: new(0.0)},
			{Type: "string", Pattern: `^\s*[0-9]+(\.[0-9]+)?\s*(B|k|K|kB|KB|M|MB|G|GB|T|TB|Ki|KiB|Mi|MiB|Gi|GiB|Ti|TiB)?\s*$`},
		}},
		reflect.TypeFor[meshtype.Duration](): {Type: "string", Pattern: `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`},
	}
}

// Schema generates the JSON Schema of one definition file, for editors (the
// catalog's files name it in a yaml-language-server comment). It describes
// what a file may contain: every field but id is optional in a file, because
// extends and the defaults fill them in; required fields of the resolved
// definition are checked by Load.
func Schema() ([]byte, error) {
	s, err := jsonschema.For[meshtype.Definition](&jsonschema.ForOptions{TypeSchemas: TypeSchemas()})
	if err != nil {
		return nil, err
	}
	s.Schema = "https://json-schema.org/draft/2020-12/schema"
	s.ID = SchemaID
	s.Title = "Meshwork worker definition"
	s.Description = "One worker of the Meshwork catalog (workers/*.yaml)."
	s.Properties["id"].Pattern = idPattern.String()
	s.Properties["extends"].Pattern = idPattern.String()
	// readonly_rootfs is always written in JSON output, where false is a
	// setting worth seeing, but a file may leave it to the default.
	iso := s.Properties["isolation"]
	iso.Required = slices.DeleteFunc(iso.Required, func(r string) bool { return r == "readonly_rootfs" })
	// Result rules are Rules too, but over the change summary, not the action.
	rules := s.Properties["result"].Properties["rules"]
	rules.Items = rules.Items.CloneSchemas()
	rules.Items.Properties["expression"].Description = "CEL boolean over result (the change summary); true allows the change"
	s.Properties["agent"].Properties["backend"].Enum = []any{"claude", "codex", "opencode", "gemini", "command"}
	out, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
