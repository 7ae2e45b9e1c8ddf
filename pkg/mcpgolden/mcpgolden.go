// Package mcpgolden keeps a golden transcript of an MCP server's surface: the
// tools it lists (names, descriptions, input and output schemas), in a txtar
// file beside the server's tests, as the go-sdk's conformance tests keep
// theirs. A change to the surface fails the test until the transcript is
// written again with -update and the change is reviewed in its diff. It is
// test support, not used by any service.
package mcpgolden

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite the golden MCP transcripts (testdata/*.txtar)")

// Tools compares the tools cs's server lists with the transcript at path.
func Tools(t *testing.T, cs *mcp.ClientSession, path string) {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	tools := slices.Clone(res.Tools)
	slices.SortFunc(tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	archive := &txtar.Archive{Comment: []byte("The tools this server lists: its MCP surface. Rewrite with go test -update, and review the diff.\n")}
	for _, tool := range tools {
		b, err := json.MarshalIndent(tool, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		archive.Files = append(archive.Files, txtar.File{Name: "tools/" + tool.Name + ".json", Data: append(b, '\n')})
	}
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
			t.Errorf("%s: a new tool, %s, is not in the transcript", path, f.Name)
		case w != string(f.Data):
			t.Errorf("%s: %s changed:\n%s\nwas:\n%s", path, f.Name, f.Data, w)
		}
		delete(wantFiles, f.Name)
	}
	for name := range wantFiles {
		t.Errorf("%s: %s is no longer listed", path, name)
	}
	t.Log("if the change is meant, rewrite the transcript with go test -update and review its diff")
}
