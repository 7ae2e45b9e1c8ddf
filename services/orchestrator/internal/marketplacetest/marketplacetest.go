// Package marketplacetest runs the real marketplace for the orchestrator's
// tests: its binary, built once per test process, serving MCP over HTTP on
// a test's database, with the built-in catalog. Its containers, volumes and
// networks carry a label of the test's and are removed with it.
package marketplacetest

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/dockertest"
	"github.com/meshwork/meshwork/pkg/servicetest"
	"github.com/meshwork/meshwork/workers"
)

// Token is the orchestrator's bearer token at a started marketplace; its
// caller is "orchestrator".
const Token = "orchestrator-test-token-0123456789"

// Options configure a marketplace.
type Options struct {
	// Images replace catalog workers' images, by worker id (an agent
	// worker on a test image, say).
	Images map[string]string
	// Tokens are more callers' tokens, by caller.
	Tokens map[string]string
	// Args are more arguments of `marketplace serve`.
	Args []string
	// Env are more variables of its environment ("NAME=value"), after the
	// defaults: "ANTHROPIC_API_KEY=" starts it without the agents'
	// credential, say.
	Env []string
}

// Marketplace is a running marketplace.
type Marketplace struct {
	// Endpoint is its MCP URL.
	Endpoint string
}

var build = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "meshwork-marketplace-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "marketplace")
	out, err := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "github.com/meshwork/meshwork/services/marketplace/cmd/marketplace").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the marketplace: %w\n%s", err, out)
	}
	return bin, nil
})

// Start runs `marketplace serve --transport http` on dsn's database until
// the test ends.
func Start(t testing.TB, dsn string, opts Options) *Marketplace {
	t.Helper()
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	catalog := t.TempDir()
	if err := os.CopyFS(catalog, workers.FS()); err != nil {
		t.Fatal(err)
	}
	for id, image := range opts.Images {
		path := filepath.Join(catalog, id+".yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		old := topLevelImage(b)
		if old == "" {
			t.Fatalf("worker %s names no image", id)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), "image: "+old, "image: "+image, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	label := fmt.Sprintf("orchestrator-%d-%d", os.Getpid(), time.Now().UnixNano())
	tokens := []string{"orchestrator=" + Token}
	for _, caller := range slices.Sorted(maps.Keys(opts.Tokens)) {
		tokens = append(tokens, caller+"="+opts.Tokens[caller])
	}
	args := []string{
		"serve", "--transport", "http", "--addr", "127.0.0.1:0", "--catalog", catalog, "--labels", "meshwork.test=" + label, "--base-dir", t.TempDir(),
		"--egress-network", "meshwork-test-" + label, // the Claude Code worker is an egress worker
	}
	cmd := exec.CommandContext(context.Background(), bin, append(args, opts.Args...)...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn, "MESHWORK_TOKENS="+strings.Join(tokens, ","), "ANTHROPIC_API_KEY=test-key-not-real")
	cmd.Env = append(cmd.Env, opts.Env...) // the last of a name counts
	// Registered first, so it runs after the process is stopped.
	t.Cleanup(func() { dockertest.RemoveLabelled(context.Background(), "meshwork.test="+label) })
	p := servicetest.Start(t, cmd, "serving MCP over HTTP")
	return &Marketplace{Endpoint: "http://" + p.Addr + "/mcp"}
}

// topLevelImage is a definition's top-level "image:", or "".
func topLevelImage(b []byte) string {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "image:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
