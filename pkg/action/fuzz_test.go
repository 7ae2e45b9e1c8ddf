package action_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/meshwork/meshwork/pkg/action"
)

// FuzzDecode: arbitrary bytes never panic, refusals are *action.Error, and an
// accepted action survives a round trip through JSON unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"type":"read","target":"README.md"}`,
		`{"type":"write","target":"a","content":"x","Target":"b"}`,
		`{"type":"tool","tool":"t","arguments":{"a":{"b":[1,2,{"c":null}]}}}`,
		`{"type":"exec","command":["go","test"]}`,
		`{"type":"search","pattern":"(?i)a+b"}`,
		`{"type":"read","target":"a","target":"b"}`,
		`{"type":"task","task":"\u0000"}`,
		`[[[[[[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := action.Decode(data)
		if err != nil {
			var ae *action.Error
			if !errors.As(err, &ae) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		enc, err := json.Marshal(a)
		if err != nil {
			t.Fatalf("accepted action does not encode: %v", err)
		}
		b, err := action.Decode(enc)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", enc, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip changed the action: %+v -> %+v", a, b)
		}
	})
}
