package action

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Limits on an encoded action.
const (
	// MaxSize is the largest encoded action Decode accepts. It leaves room for
	// a write of the largest file the default definitions allow.
	MaxSize = 32 << 20
	// MaxDepth is the deepest nesting of objects and arrays accepted.
	MaxDepth = 32
	// MaxPatternLen is the longest search pattern accepted.
	MaxPatternLen = 4096
	// MaxCommandArgs is the most argv elements an exec may have.
	MaxCommandArgs = 1024
)

// Error is why an action was refused as malformed. Field is a JSON pointer to
// the offending value ("" for the action as a whole).
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "malformed action: " + e.Msg
	}
	return "malformed action: " + e.Field + ": " + e.Msg
}

// ErrMalformed matches every *Error with errors.Is.
var ErrMalformed = errors.New("malformed action")

// Is makes errors.Is(err, ErrMalformed) true for every *Error.
func (e *Error) Is(target error) bool { return target == ErrMalformed }

var fieldNames = "type, target, content, pattern, command, task, tool, arguments"

// Decode parses one action strictly. See the package documentation for what is
// refused.
func Decode(data []byte) (meshtype.Action, error) {
	var a meshtype.Action
	if len(data) > MaxSize {
		return a, &Error{Msg: fmt.Sprintf("action is %d bytes; the limit is %d", len(data), MaxSize)}
	}
	if err := checkKeys(data); err != nil {
		return a, err
	}
	err := json.Unmarshal(data, &a, json.RejectUnknownMembers(true), jsontext.AllowInvalidUTF8(false))
	if err != nil {
		return meshtype.Action{}, unmarshalError(err)
	}
	// One canonical form: an empty list or object means the same as none,
	// so every executor and every re-encoding sees the same action.
	if len(a.Command) == 0 {
		a.Command = nil
	}
	if len(a.Arguments) == 0 {
		a.Arguments = nil
	}
	if err := validate(&a); err != nil {
		return meshtype.Action{}, err
	}
	return a, nil
}

// checkKeys walks the JSON once before decoding: it bounds nesting and refuses
// duplicate keys, including keys equal but for case, in every object.
func checkKeys(data []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true))
	type object struct{ keys map[string]string }
	var stack []*object // nil entries for arrays
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			if len(stack) == 0 {
				return nil
			}
			return &Error{Msg: "unexpected end of JSON"}
		}
		if err != nil {
			return syntaxError(err)
		}
		switch tok.Kind() {
		case '{':
			if len(stack) >= MaxDepth {
				return &Error{Field: string(dec.StackPointer()), Msg: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
			}
			stack = append(stack, &object{keys: map[string]string{}})
			continue
		case '[':
			if len(stack) >= MaxDepth {
				return &Error{Field: string(dec.StackPointer()), Msg: fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
			}
			stack = append(stack, nil)
			continue
		case '}', ']':
			stack = stack[:len(stack)-1]
			continue
		}
		// In an object, a string token read at an odd count is a key.
		top := len(stack) - 1
		if top < 0 || stack[top] == nil || tok.Kind() != '"' {
			continue
		}
		kind, length := dec.StackIndex(dec.StackDepth())
		if kind != '{' || length%2 == 0 {
			continue
		}
		key := tok.String()
		folded := strings.ToLower(key)
		if prev, dup := stack[top].keys[folded]; dup {
			where := string(dec.StackPointer())
			if i := strings.LastIndexByte(where, '/'); i >= 0 {
				where = where[:i]
			}
			if prev == key {
				return &Error{Field: where, Msg: fmt.Sprintf("duplicate key %q", key)}
			}
			return &Error{Field: where, Msg: fmt.Sprintf("keys %q and %q differ only in case", prev, key)}
		}
		stack[top].keys[folded] = key
	}
}

func syntaxError(err error) error {
	var se *jsontext.SyntacticError
	if errors.As(err, &se) {
		return &Error{Field: string(se.JSONPointer), Msg: "invalid JSON: " + se.Err.Error()}
	}
	return &Error{Msg: "invalid JSON: " + err.Error()}
}

func unmarshalError(err error) error {
	var se *json.SemanticError
	if errors.As(err, &se) {
		field := string(se.JSONPointer)
		if se.Err != nil && strings.Contains(se.Err.Error(), "unknown") {
			return &Error{Field: field, Msg: "unknown field (fields are " + fieldNames + ")"}
		}
		if se.JSONKind != 0 && se.GoType != nil {
			return &Error{Field: field, Msg: fmt.Sprintf("want %s, got a JSON %s", goKind(se.GoType), KindName(se.JSONKind))}
		}
		return &Error{Field: field, Msg: se.Error()}
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return syntaxError(err)
	}
	return &Error{Msg: err.Error()}
}

// KindName names the kind of a JSON value as people say it: "object" and
// "array" (jsontext says "{" and "["), "boolean", "string", "number",
// "null".
func KindName(k jsontext.Kind) string {
	switch k {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	}
	return k.String()
}

// goKind names the JSON a Go type takes: the action and its arguments are
// objects, command a list of strings, every other field a string.
func goKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		return "a list of strings"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a string"
}

// validate checks the fields against what the action type uses.
func validate(a *meshtype.Action) error {
	if a.Type == "" {
		return &Error{Field: "/type", Msg: "missing; one of read, write, list, search, exec, delete, task, tool"}
	}
	if !a.Type.Valid() {
		return &Error{Field: "/type", Msg: fmt.Sprintf("unknown type %q; one of read, write, list, search, exec, delete, task, tool", a.Type)}
	}
	uses := map[meshtype.ActionType]string{
		meshtype.ActionRead:   "target",
		meshtype.ActionWrite:  "target content",
		meshtype.ActionList:   "target",
		meshtype.ActionSearch: "target pattern",
		meshtype.ActionExec:   "command",
		meshtype.ActionDelete: "target",
		meshtype.ActionTask:   "task",
		meshtype.ActionTool:   "tool arguments",
	}[a.Type]
	present := []struct {
		name string
		set  bool
	}{
		{"target", a.Target != ""},
		{"content", a.Content != ""},
		{"pattern", a.Pattern != ""},
		{"command", a.Command != nil},
		{"task", a.Task != ""},
		{"tool", a.Tool != ""},
		{"arguments", a.Arguments != nil},
	}
	for _, f := range present {
		if f.set && !strings.Contains(" "+uses+" ", " "+f.name+" ") {
			return &Error{Field: "/" + f.name, Msg: fmt.Sprintf("not used by %s actions (they use: %s)", a.Type, strings.ReplaceAll(uses, " ", ", "))}
		}
	}
	switch a.Type {
	case meshtype.ActionRead, meshtype.ActionWrite, meshtype.ActionDelete:
		if a.Target == "" {
			return &Error{Field: "/target", Msg: fmt.Sprintf("missing; %s needs a path relative to the workspace", a.Type)}
		}
	case meshtype.ActionSearch:
		if a.Pattern == "" {
			return &Error{Field: "/pattern", Msg: "missing; search needs a regular expression"}
		}
		if len(a.Pattern) > MaxPatternLen {
			return &Error{Field: "/pattern", Msg: fmt.Sprintf("pattern is %d bytes; the limit is %d", len(a.Pattern), MaxPatternLen)}
		}
		if _, err := regexp.Compile(a.Pattern); err != nil {
			return &Error{Field: "/pattern", Msg: "invalid regular expression: " + strings.TrimPrefix(err.Error(), "error parsing regexp: ")}
		}
	case meshtype.ActionExec:
		if len(a.Command) == 0 || a.Command[0] == "" {
			return &Error{Field: "/command", Msg: "missing; exec needs an argv list such as [\"go\", \"test\", \"./...\"]"}
		}
		if len(a.Command) > MaxCommandArgs {
			return &Error{Field: "/command", Msg: fmt.Sprintf("%d arguments; the limit is %d", len(a.Command), MaxCommandArgs)}
		}
		for i, arg := range a.Command {
			if strings.IndexByte(arg, 0) >= 0 {
				return &Error{Field: fmt.Sprintf("/command/%d", i), Msg: "contains a NUL byte"}
			}
		}
	case meshtype.ActionTask:
		if strings.TrimSpace(a.Task) == "" {
			return &Error{Field: "/task", Msg: "missing; task needs the text of the task"}
		}
	case meshtype.ActionTool:
		if a.Tool == "" {
			return &Error{Field: "/tool", Msg: "missing; tool needs the name of the tool to call"}
		}
	}
	if !utf8.ValidString(a.Target) {
		return &Error{Field: "/target", Msg: "not valid UTF-8"}
	}
	return nil
}
