// Package mcpgolden keeps golden transcripts of an MCP server, in txtar
// files beside the server's tests, as the go-sdk's conformance tests keep
// theirs: the tools it lists (names, descriptions, input and output
// schemas), and typical calls with their results. A change to the surface fails the test until the transcript is
// written again with -update and the change is reviewed in its diff. It is
// test support, not used by any service.
package mcpgolden

import (
	"context"
	"encoding/json"
	"flag"
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
	compare(t, path, archive)
}
