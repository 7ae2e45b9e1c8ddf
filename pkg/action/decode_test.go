package action_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/action"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

func TestDecodeAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want meshtype.Action
	}{
		{`{"type":"read","target":"README.md"}`, meshtype.Action{Type: "read", Target: "README.md"}},
		{`{"type":"write","target":"a.txt","content":"hi\n"}`, meshtype.Action{Type: "write", Target: "a.txt", Content: "hi\n"}},
		{`{"type":"write","target":"empty.txt","content":""}`, meshtype.Action{Type: "write", Target: "empty.txt"}},
		{`{"type":"list"}`, meshtype.Action{Type: "list"}},
		{`{"type":"search","pattern":"func\\s+\\w+","target":"pkg"}`, meshtype.Action{Type: "search", Target: "pkg", Pattern: `func\s+\w+`}},
		{`{"type":"exec","command":["go","test","./..."]}`, meshtype.Action{Type: "exec", Command: []string{"go", "test", "./..."}}},
		{`{"type":"task","task":"Read README.md"}`, meshtype.Action{Type: "task", Task: "Read README.md"}},
		{`{"type":"tool","tool":"echo","arguments":{"text":"hi","n":2,"nested":{"a":[1,true,null]}}}`, meshtype.Action{Type: "tool", Tool: "echo", Arguments: map[string]any{"text": "hi", "n": 2.0, "nested": map[string]any{"a": []any{1.0, true, nil}}}}},
		{" \n{\"type\":\"delete\",\"target\":\"old.txt\"}\n", meshtype.Action{Type: "delete", Target: "old.txt"}},
	}
	for _, tt := range tests {
		got, err := action.Decode([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, wantField, wantMsg string
	}{
		{"unknown field", `{"type":"read","target":"a","mode":"fast"}`, "/mode", "unknown field"},
		{"case-smuggled key alone", `{"type":"read","Target":"a"}`, "/Target", "unknown field"},
		{"case-smuggled key beside", `{"type":"read","target":"a","Target":"../../etc/passwd"}`, "", `keys "target" and "Target" differ only in case`},
		{"case-smuggled type", `{"TYPE":"read","type":"write","target":"a"}`, "", "differ only in case"},
		{"duplicate key", `{"type":"read","target":"a","target":"b"}`, "", `duplicate key "target"`},
		{"duplicate type", `{"type":"read","type":"write","target":"a"}`, "", `duplicate key "type"`},
		{"duplicate in arguments", `{"type":"tool","tool":"x","arguments":{"path":"a","path":"b"}}`, "/arguments", `duplicate key "path"`},
		{"case-smuggled in arguments", `{"type":"tool","tool":"x","arguments":{"path":"docs/a","Path":"/etc"}}`, "/arguments", "differ only in case"},
		{"case-smuggled deep", `{"type":"tool","tool":"x","arguments":{"a":[{"k":1,"K":2}]}}`, "/arguments/a/0", "differ only in case"},
		{"unicode-escaped duplicate", `{"type":"read","target":"a","t\u0061rget":"b"}`, "", `duplicate key "target"`},
		{"missing type", `{"target":"a"}`, "/type", "missing"},
		{"unknown type", `{"type":"format","target":"a"}`, "/type", `unknown type "format"`},
		{"type case", `{"type":"READ","target":"a"}`, "/type", "unknown type"},
		{"field not used by type", `{"type":"read","target":"a","content":"x"}`, "/content", "not used by read actions"},
		{"command on write", `{"type":"write","target":"a","command":["rm"]}`, "/command", "not used by write actions"},
		{"read without target", `{"type":"read"}`, "/target", "missing"},
		{"write without target", `{"type":"write","content":"x"}`, "/target", "missing"},
		{"search without pattern", `{"type":"search"}`, "/pattern", "missing"},
		{"bad regex", `{"type":"search","pattern":"(unclosed"}`, "/pattern", "invalid regular expression"},
		{"exec without command", `{"type":"exec"}`, "/command", "missing"},
		{"exec empty argv0", `{"type":"exec","command":[""]}`, "/command", "missing"},
		{"exec shell string", `{"type":"exec","command":"go test ./..."}`, "/command", "want a list of strings"},
		{"exec NUL", `{"type":"exec","command":["go","te\u0000st"]}`, "/command/1", "NUL"},
		{"exec number arg", `{"type":"exec","command":["go",1]}`, "/command/1", "want a string"},
		{"task blank", `{"type":"task","task":"   "}`, "/task", "missing"},
		{"tool without name", `{"type":"tool","arguments":{}}`, "/tool", "missing"},
		{"arguments not object", `{"type":"tool","tool":"x","arguments":[1]}`, "/arguments", "want an object, got a JSON array"},
		{"target an object", `{"type":"read","target":{}}`, "/target", "want a string, got a JSON object"},
		{"target a boolean", `{"type":"read","target":true}`, "/target", "want a string, got a JSON boolean"},
		{"target not string", `{"type":"read","target":42}`, "/target", "want a string"},
		{"action not object", `"read"`, "", "want an object, got a JSON string"},
		{"null", `null`, "/type", "missing"},
		{"array", `[]`, "", "want an object, got a JSON array"},
		{"not JSON", `type=read`, "", "invalid JSON"},
		{"truncated", `{"type":"read","target":"a"`, "", ""},
		{"trailing data", `{"type":"read","target":"a"} {"type":"write"}`, "", "invalid JSON"},
		{"invalid UTF-8", "{\"type\":\"read\",\"target\":\"a\xff\"}", "", "invalid"},
		{"lone surrogate", `{"type":"read","target":"a\ud800"}`, "", "invalid"},
		{"too deep", `{"type":"tool","tool":"x","arguments":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}`, "", "nested deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := action.Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("accepted as %+v", got)
			}
			var ae *action.Error
			if !errors.As(err, &ae) || !errors.Is(err, action.ErrMalformed) {
				t.Fatalf("got %T %v, want *action.Error", err, err)
			}
			if tt.wantField != "" && ae.Field != tt.wantField {
				t.Errorf("field %q, want %q (%v)", ae.Field, tt.wantField, err)
			}
			if !strings.Contains(ae.Msg, tt.wantMsg) {
				t.Errorf("message %q, want it to contain %q", ae.Msg, tt.wantMsg)
			}
			if !reflect.DeepEqual(got, meshtype.Action{}) {
				t.Errorf("a refused action decoded partly: %+v", got)
			}
		})
	}
}

func TestDecodeSizeLimit(t *testing.T) {
	t.Parallel()
	huge := `{"type":"write","target":"a","content":"` + strings.Repeat("x", action.MaxSize) + `"}`
	if _, err := action.Decode([]byte(huge)); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("got %v, want a size error", err)
	}
	// Just under the limit decodes.
	ok := `{"type":"write","target":"a","content":"` + strings.Repeat("x", 2_000_000) + `"}`
	if a, err := action.Decode([]byte(ok)); err != nil || len(a.Content) != 2_000_000 {
		t.Errorf("2 MB write: %v", err)
	}
}
