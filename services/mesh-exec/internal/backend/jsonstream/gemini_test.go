package jsonstream

import (
	"reflect"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/backendtest"
)

// geminiSession is the session id of the gemini fixtures (testdata/gemini), which are
// reconstructed from the CLI's documentation and source, not captured; see
// testdata/gemini/README.md.
const geminiSession = "4df9d202-a0c2-4ec6-8144-8f2876aebd90"

func TestGeminiParserNewSession(t *testing.T) {
	t.Parallel()
	events, res := feed(t, Gemini(), "gemini/new_session.jsonl", backend.Request{}, 0, "")
	wantKinds := []backend.Kind{
		backend.KindInit,
		backend.KindText, backend.KindText,
		backend.KindToolUse, backend.KindToolResult, // read_file
		backend.KindToolUse, backend.KindToolResult, // replace
		backend.KindToolUse, backend.KindToolResult, // shell, failed
		backend.KindToolUse, backend.KindToolResult, // write_file, refused
		backend.KindText, backend.KindText,
		backend.KindResult,
	}
	if got := backendtest.Kinds(events); !reflect.DeepEqual(got, wantKinds) {
		t.Fatalf("kinds = %v\nwant %v", got, wantKinds)
	}
	if e := events[5]; e.Tool != "replace" || !strings.Contains(e.Text, "a - b") {
		t.Errorf("replace tool use = %+v", e)
	}
	if e := events[8]; !e.IsError || e.Tool != "run_shell_command" || e.Text != "Command exited with code 1" {
		t.Errorf("failed shell result = %+v", e)
	}
	if e := events[13]; e.IsError || e.SessionID != geminiSession || e.Text != "Fixed Add in calc/add.go; the test passes now." {
		t.Errorf("result event = %+v", e)
	}
	want := backend.Result{
		SessionID:     geminiSession,
		Output:        "Fixed Add in calc/add.go; the test passes now.",
		DurationMS:    4200,
		InputTokens:   10100,
		OutputTokens:  130,
		ToolsUsed:     []string{"read_file", "replace", "run_shell_command", "write_file"},
		FilesModified: []string{"/workspace/calc/add.go"},
	}
	if !reflect.DeepEqual(res, want) {
		t.Errorf("Finish() =\n%+v\nwant\n%+v", res, want)
	}
}

func TestGeminiParserResume(t *testing.T) {
	t.Parallel()
	_, res := feed(t, Gemini(), "gemini/resume.jsonl", backend.Request{SessionID: geminiSession}, 0, "")
	if res.IsError || res.Output != "I changed Add to return a + b." || res.SessionID != geminiSession {
		t.Errorf("Finish() = %+v", res)
	}
}

func TestGeminiParserResultError(t *testing.T) {
	t.Parallel()
	events, res := feed(t, Gemini(), "gemini/result_error.jsonl", backend.Request{}, 53, "")
	if e := events[len(events)-1]; e.Kind != backend.KindResult || !e.IsError || e.Text != "Reached max session turns for this session." {
		t.Errorf("result event = %+v", e)
	}
	if !res.IsError || res.Output != "Reached max session turns for this session." || res.InputTokens != 450 || res.Err != nil {
		t.Errorf("Finish() = %+v", res)
	}
}
