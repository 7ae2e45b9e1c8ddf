package meshapi_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshapi"
)

// Every error code is documented in docs/mcp.md, and the page names no
// code that does not exist.
func TestErrorCodesDocumented(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []meshapi.Code
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ").FindAllSubmatch(page, -1) {
		documented = append(documented, meshapi.Code(m[1]))
	}
	if !slices.Equal(documented, meshapi.Codes) {
		t.Errorf("docs/mcp.md documents the codes %v; pkg/meshapi has %v", documented, meshapi.Codes)
	}
}
