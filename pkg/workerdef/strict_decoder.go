package workerdef

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v4"
)

// strictDecoder decodes a merged yaml.Node tree into Go values, refusing
// unknown fields and wrong types and reporting each problem at the position
// (file, line, column) where the offending node was written.
//
// yaml's own decoder cannot do this here: after an extends merge one tree holds
// nodes from several files, and its errors carry neither the file nor, for type
// errors, the column.
type strictDecoder struct {
	format    *format
	origin    map[*yaml.Node]string // node -> file it was written in
	errs      Errors
	positions map[string]*yaml.Node // field path -> value node, for later checks
}

func (d *strictDecoder) fail(n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.origin[n], Line: n.Line, Column: n.Column, Msg: fmt.Sprintf(format, args...)})
}

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// decode fills v (addressable) from n; path names the field for positions.
func (d *strictDecoder) decode(n *yaml.Node, v reflect.Value, path string) {
	d.positions[path] = n
	if n.Kind == yaml.AliasNode {
		d.fail(n, "%s: aliases are not supported%s", d.displayPath(path), d.format.aliasHint)
		return
	}
	if isNull(n) {
		return // leave the zero value (or the default merged beneath it)
	}
	if v.CanAddr() && v.Addr().Type().Implements(textUnmarshalerType) {
		if n.Kind != yaml.ScalarNode {
			d.fail(n, "%s: want a scalar, got %s", d.displayPath(path), kindName(n))
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			d.fail(n, "%s: %v", d.displayPath(path), err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, "%s: want a list, got %s", d.displayPath(path), kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), path+"["+strconv.Itoa(i)+"]")
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!bool" {
			d.fail(n, "%s: want a string, got %s", d.displayPath(path), kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
			d.fail(n, "%s: want true or false, got %s", d.displayPath(path), kindName(n))
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(n.Value, 10, 64)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || err != nil {
			d.fail(n, "%s: want a whole number, got %s", d.displayPath(path), kindName(n))
			return
		}
		if v.OverflowInt(i) {
			d.fail(n, "%s: %d is too large", d.displayPath(path), i)
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		tag := n.ShortTag()
		f, err := strconv.ParseFloat(n.Value, 64)
		if n.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") || err != nil || f != f /* NaN */ {
			d.fail(n, "%s: want a number, got %s", d.displayPath(path), kindName(n))
			return
		}
		v.SetFloat(f)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			panic(fmt.Sprintf("workerdef: cannot decode into %s at %s: map keys must be strings", v.Type(), path))
		}
		d.decodeMap(n, v, path)
	case reflect.Interface:
		if v.NumMethod() != 0 {
			panic(fmt.Sprintf("workerdef: cannot decode into %s at %s", v.Type(), path))
		}
		if x := d.plainValue(n, path); x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		// The definition types use only the kinds above; a new field of another
		// kind is a programming error caught by the catalog test.
		panic(fmt.Sprintf("workerdef: cannot decode into %s at %s", v.Type(), path))
	}
}

func (d *strictDecoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, "%s: want a mapping, got %s", d.displayPath(path), kindName(n))
		return
	}
	fields := fieldsOf(v.Type())
	d.mapKeys(n, path, func(k, val *yaml.Node) {
		idx, ok := fields.index[k.Value]
		if !ok {
			d.fail(k, "%s", unknownFieldMessage(path, k.Value, fields.names))
			return
		}
		d.decode(val, v.Field(idx), joinPath(path, k.Value))
	})
}

// mapKeys walks the keys of a mapping in order, refusing non-scalar keys,
// duplicates and merge keys, and calls f for the others.
func (d *strictDecoder) mapKeys(n *yaml.Node, path string, f func(k, val *yaml.Node)) {
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, "%s: keys must be plain names", d.displayPath(path))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.fail(k, "duplicate key %q (first written at line %d)", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		if k.Value == "<<" {
			d.fail(k, "%s: merge keys (<<) are not supported%s", d.displayPath(path), d.format.mergeHint)
			continue
		}
		f(k, val)
	}
}

// decodeMap fills a map with string keys from a mapping, one entry per key.
func (d *strictDecoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, "%s: want a mapping, got %s", d.displayPath(path), kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	d.mapKeys(n, path, func(k, val *yaml.Node) {
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, elem, joinPath(path, k.Value))
		m.SetMapIndex(reflect.ValueOf(k.Value).Convert(v.Type().Key()), elem)
	})
	v.Set(m)
}

// plainValue decodes any YAML value into plain Go values, the shapes JSON
// has: nil, bool, int64, float64 (finite), string, []any and map[string]any.
// Scalars other than null, booleans and numbers are strings. A value with an
// error is nil.
func (d *strictDecoder) plainValue(n *yaml.Node, path string) any {
	d.positions[path] = n
	switch n.Kind {
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, item := range n.Content {
			out[i] = d.plainValue(item, path+"["+strconv.Itoa(i)+"]")
		}
		return out
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		d.mapKeys(n, path, func(k, val *yaml.Node) {
			out[k.Value] = d.plainValue(val, joinPath(path, k.Value))
		})
		return out
	case yaml.ScalarNode:
	default:
		d.fail(n, "%s: aliases are not supported%s", d.displayPath(path), d.format.aliasHint)
		return nil
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) != nil {
			d.fail(n, "%s: want true or false, got %s", d.displayPath(path), kindName(n))
			return nil
		}
		return b
	case "!!int":
		var i int64
		if n.Decode(&i) != nil {
			d.fail(n, "%s: %s is not a whole number that fits in 64 bits", d.displayPath(path), kindName(n))
			return nil
		}
		return i
	case "!!float":
		var f float64
		if n.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(n, "%s: want a finite number, got %s", d.displayPath(path), kindName(n))
			return nil
		}
		return f
	}
	return n.Value
}

func unknownFieldMessage(path, key string, known []string) string {
	msg := fmt.Sprintf("unknown field %q", key)
	if path != "" {
		msg = fmt.Sprintf("unknown field %q in %s", key, path)
	}
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	for _, k := range known {
		if norm(k) == norm(key) || editDistance(k, key) <= 2 {
			return msg + fmt.Sprintf(" (did you mean %q?)", k)
		}
	}
	return msg + " (known: " + strings.Join(known, ", ") + ")"
}

type structFields struct {
	index map[string]int
	names []string
}

var fieldCache sync.Map // reflect.Type -> *structFields

// fieldsOf maps a struct's yaml names to field indexes.
func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{index: map[string]int{}}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		f.index[name] = i
		f.names = append(f.names, name)
	}
	slices.Sort(f.names)
	fieldCache.Store(t, f)
	return f
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *strictDecoder) displayPath(path string) string {
	if path == "" {
		return d.format.fields
	}
	return path
}

// editDistance is the Levenshtein distance of two short field names.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
