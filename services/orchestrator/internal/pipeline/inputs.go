package pipeline

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strings"
)

// InputError is the error of [Pipeline.CheckInputs]: every problem with the
// inputs of a run, one per input, by input name.
type InputError struct {
	Problems []string
}

func (e *InputError) Error() string {
	return "invalid inputs: " + strings.Join(e.Problems, "; ")
}

// CheckInputs checks the inputs a run is started with against the pipeline's
// declarations and returns the inputs the run uses: every declared input,
// given, defaulted or (optional without a default) its type's zero value.
// Values are normalized to what JSON decoding gives, so that a run resumed
// from a checkpoint sees the same values: numbers are float64, objects
// map[string]any and lists []any, recursively.
//
// A nil value counts as not given. Missing required inputs, unknown inputs
// and values of the wrong type are refused together, as an *InputError.
func (p *Pipeline) CheckInputs(given map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(p.def.Inputs))
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(given)) {
		in, ok := p.def.Inputs[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("unknown input %q (%s)", name, inputNames(p.def.Inputs)))
			continue
		}
		if given[name] == nil {
			continue // null is not given: the default applies
		}
		v, problem := checkValue(in.Type, given[name])
		if problem != "" {
			problems = append(problems, fmt.Sprintf("input %q: %s", name, problem))
			continue
		}
		out[name] = v
	}
	for _, name := range slices.Sorted(maps.Keys(p.def.Inputs)) {
		in := p.def.Inputs[name]
		if given[name] != nil {
			continue
		}
		switch {
		case in.Required:
			problems = append(problems, fmt.Sprintf("missing required input %q (%s)", name, article(in.Type)))
		case in.Default != nil:
			out[name], _ = jsonValue(reflect.ValueOf(in.Default), 0) // a copy: the run may not change the pipeline
		default:
			out[name] = zeroValue(in.Type)
		}
	}
	if len(problems) > 0 {
		return nil, &InputError{Problems: problems}
	}
	return out, nil
}

func inputNames(inputs map[string]Input) string {
	if len(inputs) == 0 {
		return "the pipeline has no inputs"
	}
	return "inputs: " + strings.Join(slices.Sorted(maps.Keys(inputs)), ", ")
}

// article names the type with its article: "a string", "an object".
func article(t InputType) string {
	if t == TypeObject {
		return "an object"
	}
	return "a " + string(t)
}

func zeroValue(t InputType) any {
	switch t {
	case TypeNumber:
		return 0.0
	case TypeBoolean:
		return false
	case TypeObject:
		return map[string]any{}
	}
	return ""
}

// checkValue checks v against an input type and returns it normalized to
// JSON's shapes, or a problem.
func checkValue(t InputType, v any) (any, string) {
	norm, ok := jsonValue(reflect.ValueOf(v), 0)
	if !ok {
		return nil, fmt.Sprintf("want %s, got %T, which is not JSON data", article(t), v)
	}
	got := jsonKind(norm)
	if t == TypeRepository {
		return norm, repositoryProblem(norm, got)
	}
	if got != string(t) {
		return nil, fmt.Sprintf("want %s, got %s", article(t), describe(norm, got))
	}
	return norm, ""
}

// repositoryProblem checks the shape of a repository value: an object with
// exactly one of git ({url, ref?, depth?}) or archive ({tar_gz_base64,
// sha256}). The marketplace checks the rest (allowlists, limits, content).
func repositoryProblem(v any, kind string) string {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Sprintf(`want a repository ({"git": {"url": ...}} or {"archive": {...}}), got %s`, describe(v, kind))
	}
	_, git := m["git"]
	_, archive := m["archive"]
	switch {
	case len(m) != 1 || git == archive:
		return fmt.Sprintf(`want a repository: an object with exactly one of "git" or "archive", got the keys %s`, strings.Join(slices.Sorted(maps.Keys(m)), ", "))
	case git:
		g, ok := m["git"].(map[string]any)
		if !ok {
			return `"git" must be an object {"url", "ref", "depth"}`
		}
		u, _ := g["url"].(string)
		if u == "" {
			return `"git" needs a "url"`
		}
		// A run keeps its inputs: credentials must not be among them.
		if parsed, err := url.Parse(u); err == nil && (parsed.User != nil || parsed.RawQuery != "") {
			return `"git.url" must not carry credentials or a query: the marketplace's operator configures credentials per host`
		}
	default:
		if _, ok := m["archive"].(map[string]any); !ok {
			return `"archive" must be an object {"tar_gz_base64", "sha256"}`
		}
	}
	return ""
}

// maxDepth bounds the nesting of an input value.
const maxDepth = 64

// jsonValue converts a Go value to JSON's shapes: nil, bool, float64
// (finite), string, []any and map[string]any.
func jsonValue(v reflect.Value, depth int) (any, bool) {
	if depth > maxDepth {
		return nil, false
	}
	if !v.IsValid() {
		return nil, true
	}
	if n, ok := v.Interface().(json.Number); ok {
		f, err := n.Float64()
		return f, err == nil && !math.IsInf(f, 0)
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return nil, true
		}
		return jsonValue(v.Elem(), depth+1)
	case reflect.Bool:
		return v.Bool(), true
	case reflect.String:
		return v.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return float64(v.Uint()), true
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		return f, !math.IsNaN(f) && !math.IsInf(f, 0)
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil, true
		}
		out := make([]any, v.Len())
		for i := range out {
			x, ok := jsonValue(v.Index(i), depth+1)
			if !ok {
				return nil, false
			}
			out[i] = x
		}
		return out, true
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return nil, false
		}
		if v.IsNil() {
			return nil, true
		}
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			x, ok := jsonValue(it.Value(), depth+1)
			if !ok {
				return nil, false
			}
			out[it.Key().String()] = x
		}
		return out, true
	}
	return nil, false
}

// jsonKind names a normalized value's type as the input types do.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return string(TypeBoolean)
	case float64:
		return string(TypeNumber)
	case string:
		return string(TypeString)
	case map[string]any:
		return string(TypeObject)
	case []any:
		return "list"
	}
	return "something else"
}

func describe(v any, kind string) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("a string (%q)", v)
	case bool, float64:
		return fmt.Sprintf("a %s (%v)", kind, v)
	case []any:
		return "a list"
	}
	return "an " + kind
}
