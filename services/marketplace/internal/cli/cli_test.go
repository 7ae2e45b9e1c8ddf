package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/pgtest"
	"github.com/meshwork/meshwork/services/marketplace/internal/cli"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// run executes the marketplace command line and returns its output.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := cli.NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestMigrateCommand(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.EmptyDSN(t))

	out, err := run(t, "migrate")
	if err != nil || !strings.Contains(out, "applied 00001 00001_marketplace.sql") {
		t.Fatalf("first migrate: %v\n%s", err, out)
	}
	out, err = run(t, "migrate")
	if err != nil || strings.TrimSpace(out) != "schema is up to date" {
		t.Fatalf("second migrate: %v\n%s", err, out)
	}
	out, err = run(t, "migrate", "status")
	if err != nil || !strings.Contains(out, "00001_marketplace.sql") || regexp.MustCompile(`(?m)pending\s*$`).MatchString(out) {
		t.Fatalf("status: %v\n%s", err, out)
	}
}

func TestMigrateWithoutDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	_, err := run(t, "migrate")
	if err == nil || !strings.Contains(err.Error(), "set DATABASE_URL") {
		t.Errorf("got %v, want a hint to set DATABASE_URL", err)
	}
	t.Setenv("DATABASE_URL", "postgres://user:hunter2@127.0.0.1:1/db?connect_timeout=2")
	_, err = run(t, "migrate")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("got %v, want a connection error that does not echo the password", err)
	}
}

func TestWorkersCommands(t *testing.T) {
	t.Parallel()
	out, err := run(t, "workers", "validate")
	if err != nil || !strings.HasPrefix(out, "ok: 8 workers") {
		t.Errorf("validate built-in catalog: %v\n%s", err, out)
	}
	out, err = run(t, "workers", "describe", "filesystem_research_v1")
	if err != nil || !strings.Contains(out, `"readonly": true`) || !strings.Contains(out, `"definition_hash"`) {
		t.Errorf("describe: %v\n%s", err, out)
	}
	if _, err := run(t, "workers", "lint"); err == nil || !strings.Contains(err.Error(), `unknown command "lint" for "marketplace workers"`) {
		t.Errorf("an unknown command: %v", err)
	}
	if _, err := run(t, "workers", "describe", "nope_v1"); err == nil || !strings.Contains(err.Error(), `no worker "nope_v1"`) {
		t.Errorf("describe unknown: %v", err)
	}

	dir := t.TempDir()
	bad := "id: x_v1\nname: X\nkind: builtin\nimage: i\ntools: [read]\nconstraints:\n  max_file_size: 1 gigabyte\n"
	if err := os.WriteFile(filepath.Join(dir, "x.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "workers", "validate", "--catalog", dir)
	if err == nil || !strings.Contains(err.Error(), "x.yaml:7:18: constraints.max_file_size: invalid size") {
		t.Errorf("validate bad catalog: %v", err)
	}
}

// The marketplace over real stdio: `marketplace serve --transport stdio` as a
// subprocess, driven by an MCP client through its stdin and stdout.
func TestServeStdio(t *testing.T) {
	t.Parallel()
	bin, label := buildMarketplace(t)
	cmd := exec.Command(bin, "serve", "--transport", "stdio", "--labels", label)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.DSN(t))
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting over stdio: %v", err)
	}
	defer cs.Close()

	callOK := func(tool string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if res.IsError {
			t.Fatalf("%s: %s", tool, text)
		}
		return text
	}
	callOK("spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "stdio"})
	callOK("execute_in_worker", map[string]any{"journey_id": "stdio", "action": map[string]any{"type": "write", "target": "a.txt", "content": "over stdio"}})
	if out := callOK("execute_in_worker", map[string]any{"journey_id": "stdio", "action": map[string]any{"type": "read", "target": "a.txt"}}); !strings.Contains(out, "over stdio") {
		t.Errorf("read: %s", out)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name:      "execute_in_worker",
		Arguments: map[string]any{"journey_id": "stdio", "action": map[string]any{"type": "write", "target": "../escape", "content": "x"}},
	})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "path_safety") {
		t.Errorf("traversal over stdio: %v %+v", err, res)
	}
	callOK("stop_worker", map[string]any{"journey_id": "stdio", "workspace": "delete"})
}

// buildMarketplace builds the marketplace binary and returns it with a
// meshwork.test label whose containers and volumes are removed when the test
// ends.
func buildMarketplace(t testing.TB) (bin, label string) {
	t.Helper()
	dockertest.RequireImage(t, "meshwork/worker:latest", "run `make offline-images`")
	bin = filepath.Join(t.TempDir(), "marketplace")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/meshwork/meshwork/services/marketplace/cmd/marketplace").CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	// Unique among the tests running at once: a marketplace's start-up
	// removes the workers with its label that its database does not know.
	label = "meshwork.test=cli-" + strings.ToLower(rand.Text())
	t.Cleanup(func() { dockertest.RemoveLabelled(context.Background(), label) })
	return bin, label
}
