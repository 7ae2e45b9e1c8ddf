package workerdef_test

import (
	"reflect"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/workerdef"
)

type doc struct {
	Name  string             `yaml:"name"`
	Items map[string]item    `yaml:"items"`
	Any   any                `yaml:"any"`
	List  []item             `yaml:"list"`
	Wait  *meshtype.Duration `yaml:"wait"`
}

type item struct {
	N    int  `yaml:"n"`
	Flag bool `yaml:"flag"`
}

func TestDecodeYAML(t *testing.T) {
	t.Parallel()
	var d doc
	pos, err := workerdef.DecodeYAML("d.yaml", []byte("name: x\nitems: {a: {n: 1}, b: {flag: true}, c: ~}\nany: {s: str, i: 3, f: 1.5, b: false, n: null, l: [1, x], m: {k: v}, h: 0x10}\nlist: [{n: 2}]\nwait: 2s\n"), "thing", &d)
	if err != nil {
		t.Fatal(err)
	}
	want := doc{
		Name:  "x",
		Items: map[string]item{"a": {N: 1}, "b": {Flag: true}, "c": {}},
		Any:   map[string]any{"s": "str", "i": int64(3), "f": 1.5, "b": false, "n": nil, "l": []any{int64(1), "x"}, "m": map[string]any{"k": "v"}, "h": int64(16)},
		List:  []item{{N: 2}},
		Wait:  new(meshtype.Duration(2e9)),
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got %#v\nwant %#v", d, want)
	}
	for path, line := range map[string]int{"": 1, "name": 1, "items.a.n": 2, "items.b": 2, "any.l[1]": 3, "list[0].n": 4, "wait": 5} {
		if n := pos[path]; n == nil || n.Line != line {
			t.Errorf("position of %q: %v, want line %d", path, n, line)
		}
	}
}

func TestDecodeYAMLErrors(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]string{
		"":                            "d.yaml:1:1: empty file: want a thing mapping",
		"[1]":                         "d.yaml:1:1: want a mapping of thing fields, got a list",
		"name: x\nnam: y\n":           `d.yaml:2:1: unknown field "nam" (did you mean "name"?)`,
		"items: [a]\n":                "d.yaml:1:8: items: want a mapping, got a list",
		"items: {a: {n: x}}\n":        `d.yaml:1:16: items.a.n: want a whole number, got "x"`,
		"items: {a: {}, a: {}}\n":     `d.yaml:1:16: duplicate key "a" (first written at line 1)`,
		"items: {<<: {}}\n":           "d.yaml:1:9: items: merge keys (<<) are not supported; write the keys out",
		"items: {[a]: {}}\n":          "d.yaml:1:9: items: keys must be plain names",
		"name: &a x\nany: [*a]\n":     "d.yaml:2:7: any[0]: aliases are not supported in things; write the value out",
		"any: {a: .inf}\n":            `d.yaml:1:10: any.a: want a finite number, got ".inf"`,
		"any: {a: 1, a: 2}\n":         `d.yaml:1:13: duplicate key "a" (first written at line 1)`,
		"any: 18446744073709551615\n": `d.yaml:1:6: any: "18446744073709551615" is not a whole number that fits in 64 bits`,
		"wait: soon\n":                `d.yaml:1:7: wait: invalid duration "soon": want a duration such as 30s, 5m or 1h30m`,
		"name: x\nname: y\n":          `d.yaml:2:1: duplicate key "name" (first written at line 1)`,
	} {
		var d doc
		_, err := workerdef.DecodeYAML("d.yaml", []byte(src), "thing", &d)
		if err == nil || err.Error() != want {
			t.Errorf("%q: got\n%v\nwant\n%s", src, err, want)
		}
	}
	// Every problem at once.
	var d doc
	_, err := workerdef.DecodeYAML("d.yaml", []byte("name: [x]\nitems: {a: {n: y}}\nbogus: 1\n"), "thing", &d)
	want := "d.yaml:1:7: name: want a string, got a list\nd.yaml:2:16: items.a.n: want a whole number, got \"y\"\nd.yaml:3:1: unknown field \"bogus\" (known: any, items, list, name, wait)"
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}
