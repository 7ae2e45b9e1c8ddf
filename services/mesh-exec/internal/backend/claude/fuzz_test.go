package claude

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// FuzzParser feeds arbitrary output to the parser: it must never panic,
// Finish must always give a result that is an error exactly when it is
// classified as one, and the same input must give the same events and
// result.
func FuzzParser(f *testing.F) {
	// Seeds line by line: whole captures are large, and the fuzzer spends
	// its time minimizing large inputs instead of running new ones.
	for _, dir := range []string{"claude-code-2.1.330", "handwritten"} {
		files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.json*"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			for line := range bytes.Lines(b) {
				f.Add(line, 1, "")
			}
		}
	}
	f.Add([]byte(`{"type":"system","subtype":"init","session_id":"a"}
{"type":"assistant","message":{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"Write","input":{"file_path":"/r/x"}}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t","is_error":true,"content":"no"}]}}
{"type":"result","is_error":false,"result":"done","session_id":"b","total_cost_usd":0.1,"num_turns":2,"usage":{"input_tokens":5,"output_tokens":6}}`), 0, "")
	f.Add([]byte(`{"type":"result","is_error":true,"errors":["No conversation found with session ID: x"]}`), 1, "")
	f.Add([]byte(`{"type":"assistant","message":{"content":[{"type":"tool_use","id":"a","name":"Edit","input":{"file_path":7}}]}}`), 0, "")
	f.Add([]byte("\x00{\n}\n{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\",\"content\":[1,{\"type\":\"text\"}]}]}}"), 137, "Killed")

	f.Fuzz(func(t *testing.T, data []byte, exitCode int, stderr string) {
		run := func() ([]backend.Event, backend.Result) {
			p := New(Config{}).NewParser(backend.Request{Task: "fuzz"})
			var events []backend.Event
			for line := range bytes.SplitSeq(data, []byte("\n")) {
				events = append(events, p.Line(line)...)
			}
			return events, p.Finish(exitCode, stderr)
		}
		events, res := run()
		events2, res2 := run()
		if !reflect.DeepEqual(events, events2) || !reflect.DeepEqual(res, res2) {
			t.Fatalf("two parses of the same input differ:\n%+v %+v\n%+v %+v", events, res, events2, res2)
		}
		if res.Err != nil && !res.IsError {
			t.Errorf("Err = %v on a successful result", res.Err)
		}
		if res.IsError && res.Output == "" {
			t.Error("an error result has no Output")
		}
		for _, list := range [][]string{res.ToolsUsed, res.FilesModified} {
			if len(slices.Compact(sortedCopy(list))) != len(list) {
				t.Errorf("duplicates in %q", list)
			}
		}
	})
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
