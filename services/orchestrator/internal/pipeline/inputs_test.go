package pipeline_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

const inputsPipeline = `name: p
inputs:
  task: {type: string, required: true, description: What to do.}
  depth: {type: number, default: 2}
  ratio: {type: number}
  verbose: {type: boolean, default: true}
  quiet: {type: boolean}
  opts: {type: object, default: {tone: dry, n: 1, tags: [a]}}
  extra: {type: object}
  note: {type: string}
roles: {r: {via: mesh, repository: w}}
nodes:
  - {id: a, role: r, task: "{{ .inputs.task }}"}
`

func TestCheckInputs(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, inputsPipeline)
	defaults := map[string]any{
		"depth": 2.0, "ratio": 0.0, "verbose": true, "quiet": false,
		"opts": map[string]any{"tone": "dry", "n": 1.0, "tags": []any{"a"}}, "extra": map[string]any{}, "note": "",
	}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range defaults {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name  string
		given map[string]any
		want  map[string]any
		err   string
	}{
		{"defaults and zero values", map[string]any{"task": "x"}, with("task", "x"), ""},
		{"null counts as not given", map[string]any{"task": "x", "depth": nil}, with("task", "x"), ""},
		{"given values win", map[string]any{"task": "x", "depth": 5, "verbose": false, "note": "n"}, with("task", "x", "depth", 5.0, "verbose", false, "note", "n"), ""},
		{"numbers of any Go type become float64", map[string]any{"task": "x", "depth": uint8(7), "ratio": float32(0.5)}, with("task", "x", "depth", 7.0, "ratio", 0.5), ""},
		{"a json.Number", map[string]any{"task": "x", "depth": json.Number("12")}, with("task", "x", "depth", 12.0), ""},
		{
			"objects are normalized",
			map[string]any{"task": "x", "extra": map[string]int{"k": 1}, "opts": map[string]any{"list": []int{1, 2}, "p": new("s")}},
			with("task", "x", "extra", map[string]any{"k": 1.0}, "opts", map[string]any{"list": []any{1.0, 2.0}, "p": "s"}), "",
		},
		{"missing required", map[string]any{}, nil, `invalid inputs: missing required input "task" (a string)`},
		{"null for a required input", map[string]any{"task": nil}, nil, `invalid inputs: missing required input "task" (a string)`},
		{"unknown input", map[string]any{"task": "x", "tsak": "y"}, nil, `invalid inputs: unknown input "tsak" (inputs: depth, extra, note, opts, quiet, ratio, task, verbose)`},
		{
			"wrong types, every problem at once",
			map[string]any{"task": 3, "depth": "3", "verbose": "yes", "extra": []any{1}, "opts": "o"},
			nil,
			`invalid inputs: input "depth": want a number, got a string ("3"); input "extra": want an object, got a list; input "opts": want an object, got a string ("o"); input "task": want a string, got a number (3); input "verbose": want a boolean, got a string ("yes")`,
		},
		{"not JSON data", map[string]any{"task": "x", "extra": map[string]any{"f": func() {}}}, nil, `invalid inputs: input "extra": want an object, got map[string]interface {}, which is not JSON data`},
		{"not a finite number", map[string]any{"task": "x", "ratio": math.Inf(1)}, nil, `invalid inputs: input "ratio": want a number, got float64, which is not JSON data`},
		{"non-string keys", map[string]any{"task": "x", "extra": map[int]any{1: "a"}}, nil, `invalid inputs: input "extra": want an object, got map[int]interface {}, which is not JSON data`},
	}
	for _, tt := range tests {
		got, err := p.CheckInputs(tt.given)
		if tt.err != "" {
			var ie *pipeline.InputError
			if err == nil || err.Error() != tt.err || !errors.As(err, &ie) {
				t.Errorf("%s: got %v, want %s", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %#v, %v\nwant %#v", tt.name, got, err, tt.want)
		}
	}
}

// Checked inputs survive a JSON round trip unchanged, as a resumed run sees
// them.
func TestCheckInputsAreJSONShaped(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, inputsPipeline)
	got, err := p.CheckInputs(map[string]any{"task": "x", "extra": map[string]any{"n": []int{1, 2}, "deep": map[string]any{"b": true}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, back) {
		t.Errorf("JSON round trip changed the inputs:\n%#v\n%#v", got, back)
	}
}

func TestCheckInputsWithoutDeclarations(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, "name: p\nroles: {r: {via: mesh, repository: w}}\nnodes: [{id: a, role: r, task: x}]\n")
	if got, err := p.CheckInputs(nil); err != nil || len(got) != 0 {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := p.CheckInputs(map[string]any{"x": 1}); err == nil || err.Error() != `invalid inputs: unknown input "x" (the pipeline has no inputs)` {
		t.Errorf("got %v", err)
	}
}

// A run cannot change the pipeline's defaults through its inputs.
func TestCheckInputsCopiesDefaults(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, inputsPipeline)
	first, err := p.CheckInputs(map[string]any{"task": "x"})
	if err != nil {
		t.Fatal(err)
	}
	first["opts"].(map[string]any)["tone"] = "changed"
	first["opts"].(map[string]any)["tags"].([]any)[0] = "changed"
	second, _ := p.CheckInputs(map[string]any{"task": "x"})
	if opts := second["opts"].(map[string]any); opts["tone"] != "dry" || opts["tags"].([]any)[0] != "a" {
		t.Errorf("the default changed: %v", opts)
	}
}

// A repository input is a workspace source: an object with exactly one of
// git or archive; the marketplace checks the rest.
func TestCheckRepositoryInput(t *testing.T) {
	t.Parallel()
	p := mustLoad(t, `name: p
inputs:
  repo: {type: repository, required: true}
roles: {r: {via: marketplace, worker: w_v1, source: {input: repo}}}
nodes:
  - {id: a, role: r, task: fix it}
`)
	good := map[string]any{"git": map[string]any{"url": "/sources/app", "ref": "main"}}
	if got, err := p.CheckInputs(map[string]any{"repo": good}); err != nil || !reflect.DeepEqual(got["repo"], good) {
		t.Fatalf("a git repository: %v, %v", got, err)
	}
	for _, tt := range []struct {
		value any
		want  string
	}{
		{"https://example.com/x.git", `input "repo": want a repository ({"git": {"url": ...}} or {"archive": {...}}), got a string ("https://example.com/x.git")`},
		{map[string]any{}, `input "repo": want a repository: an object with exactly one of "git" or "archive", got the keys `},
		{map[string]any{"git": map[string]any{"url": "x"}, "archive": map[string]any{}}, `got the keys archive, git`},
		{map[string]any{"git": "x"}, `"git" must be an object {"url", "ref", "depth"}`},
		{map[string]any{"git": map[string]any{"ref": "main"}}, `"git" needs a "url"`},
		{map[string]any{"journey": "j"}, `got the keys journey`},
		{map[string]any{"git": map[string]any{"url": "https://bot:token@git.example.com/x.git"}}, `must not carry credentials or a query`},
	} {
		_, err := p.CheckInputs(map[string]any{"repo": tt.value})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: got %v, want %q", tt.value, err, tt.want)
		}
	}
	if _, err := p.CheckInputs(nil); err == nil || !strings.Contains(err.Error(), `missing required input "repo" (a repository)`) {
		t.Errorf("missing: %v", err)
	}
}
