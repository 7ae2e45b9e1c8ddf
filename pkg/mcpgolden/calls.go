package mcpgolden

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/tools/txtar"
)

// Call is one tool call of a transcript of typical calls.
type Call struct {
	// Name names the call in the transcript: calls/NN-name.json.
	Name string
	Tool string
	Args map[string]any
	// ArgsFrom, when set, makes Args at the call's turn, from what earlier
	// calls returned (a run's id).
	ArgsFrom func() map[string]any
	// Then, when set, runs after the call and before the next one (to wait
	// for what the call started, say), with the call's structured result.
	Then func(t *testing.T, result map[string]any)
}

// Calls makes calls through cs in order and compares each request and its
// result (isError, structured content, text) with the transcript at path,
// once Scrub has replaced what differs from one run to the next. A change
// fails the test until the transcript is written again with -update and
// the change is reviewed in its diff.
func Calls(t *testing.T, cs *mcp.ClientSession, path string, calls []Call) {
	t.Helper()
	archive := &txtar.Archive{Comment: []byte("Typical calls of this server, in order, each its request and its result, with ids and times scrubbed.\nRewrite with go test -update, and review the diff.\n")}
	for i, c := range calls {
		if c.ArgsFrom != nil {
			c.Args = c.ArgsFrom()
		}
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.Tool, Arguments: c.Args})
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		var text []string
		for _, content := range res.Content {
			if tc, ok := content.(*mcp.TextContent); ok {
				text = append(text, tc.Text)
			}
		}
		record := map[string]any{
			"request": map[string]any{"tool": c.Tool, "arguments": c.Args},
			"result":  map[string]any{"isError": res.IsError, "structuredContent": res.StructuredContent},
		}
		if res.StructuredContent == nil {
			// The text is the result only when there is no structure: the
			// SDK repeats the structure as text otherwise.
			record["result"].(map[string]any)["text"] = strings.Join(text, "\n")
		}
		b, err := json.Marshal(record)
		if err != nil {
			t.Fatal(err)
		}
		var generic any
		if err := json.Unmarshal(b, &generic); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(Scrub(generic)); err != nil {
			t.Fatal(err)
		}
		archive.Files = append(archive.Files, txtar.File{Name: fmt.Sprintf("calls/%02d-%s.json", i+1, c.Name), Data: out.Bytes()})
		if c.Then != nil {
			structured, _ := generic.(map[string]any)["result"].(map[string]any)["structuredContent"].(map[string]any)
			c.Then(t, structured)
		}
	}
	compare(t, path, archive)
}

var (
	uuidRE = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	timeRE = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`)
	hexRE  = regexp.MustCompile(`\b[0-9a-f]{32,64}\b`)
	// tempRE is a test's temporary directory (t.TempDir).
	tempRE = regexp.MustCompile(regexp.QuoteMeta(os.TempDir()) + `/[A-Za-z0-9_]+/\d{3}`)
)

// varying are keys whose values differ from one run to the next whatever
// they hold: durations, sizes, the name of the replica that served.
var varying = map[string]bool{"duration_ms": true, "elapsed_ms": true, "bytes": true, "replica": true}

// Scrub replaces in v what differs from one run to the next: UUIDs, times,
// long hex ids (trace ids, container ids, hashes), tests' temporary
// directories and the values of varying keys (durations, sizes, replica
// names).
func Scrub(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if varying[k] {
				out[k] = "<varies>"
				continue
			}
			out[k] = Scrub(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = Scrub(x)
		}
		return out
	case string:
		s := tempRE.ReplaceAllString(v, "<tmp>")
		s = uuidRE.ReplaceAllString(s, "<uuid>")
		s = timeRE.ReplaceAllString(s, "<time>")
		return hexRE.ReplaceAllString(s, "<hex>")
	}
	return v
}

// compare checks archive against the transcript at path, or writes it with
// -update, saying file by file what changed.
func compare(t *testing.T, path string, archive *txtar.Archive) {
	t.Helper()
	got := txtar.Format(archive)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the transcript (write it with go test -update): %v", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	wantFiles := map[string]string{}
	for _, f := range txtar.Parse(want).Files {
		wantFiles[f.Name] = string(f.Data)
	}
	for _, f := range archive.Files {
		switch w, ok := wantFiles[f.Name]; {
		case !ok:
			t.Errorf("%s: %s is new, not in the transcript", path, f.Name)
		case w != string(f.Data):
			t.Errorf("%s: %s changed:\n%s\nwas:\n%s", path, f.Name, f.Data, w)
		}
		delete(wantFiles, f.Name)
	}
	gone := make([]string, 0, len(wantFiles))
	for name := range wantFiles {
		gone = append(gone, name)
	}
	sort.Strings(gone)
	for _, name := range gone {
		t.Errorf("%s: %s is gone", path, name)
	}
	t.Log("if the change is meant, rewrite the transcript with go test -update and review its diff")
}
