package mcptools_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/mcptools"
)

// /mcp takes what /v1 takes: a call larger than api.MaxRequestBytes (run
// inputs, a decision's value) is refused before it is read.
func TestHTTPHandlerBoundsARequest(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(mcptools.HTTPHandler(mcp.NewServer(&mcp.Implementation{Name: "test"}, nil), nil))
	defer srv.Close()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_pipeline","arguments":{"pipeline":"` + strings.Repeat("x", api.MaxRequestBytes) + `"}}}`
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a call of %d bytes: %s, want 413", len(body), resp.Status)
	}
}
