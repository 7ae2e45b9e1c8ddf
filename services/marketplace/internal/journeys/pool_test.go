package journeys

import (
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/workerdef"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/workers"
)

// unusedRuntime stands for a runtime in tests that never reach it: New
// and poolOf only look at which levels have one.
type unusedRuntime struct{ workerruntime.Runtime }

func newTestManager(t *testing.T, cfg Config) (*Manager, error) {
	t.Helper()
	catalog, err := workers.Load()
	if err != nil {
		t.Fatal(err)
	}
	b, err := bases.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog, cfg.Store, cfg.Bases = catalog, store.New(nil), b
	cfg.Runtimes = map[meshtype.IsolationLevel]workerruntime.Runtime{meshtype.IsolationContainer: unusedRuntime{}}
	return New(cfg)
}

// The operator's pool sizes name catalog workers and stay within the
// definitions' bound, and they override the definitions' sizes.
func TestPoolSizes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sizes map[string]int
		want  string
	}{
		{map[string]int{"no_such_worker_v1": 2}, `worker "no_such_worker_v1", which is not in the catalog`},
		{map[string]int{"shell_v1": workerdef.MaxPoolSize + 1}, "must be from 0 to 64, got 65"},
		{map[string]int{"shell_v1": -1}, "must be from 0 to 64, got -1"},
	} {
		if _, err := newTestManager(t, Config{PoolSizes: tc.sizes}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pool sizes %v: %v, want %q", tc.sizes, err, tc.want)
		}
	}

	m, err := newTestManager(t, Config{PoolSizes: map[string]int{"shell_v1": 3, "claude_code_assistant_v1": 2}})
	if err != nil {
		t.Fatal(err)
	}
	shell, _ := m.cfg.Catalog.Lookup("shell_v1")
	if p, ok := m.poolOf(shell); !ok || p.size != 3 || p.maxAge.String() != "1h0m0s" {
		t.Errorf("shell_v1's pool: %+v %v, want size 3 from the operator and the default max_age 1h", p, ok)
	}
	git, _ := m.cfg.Catalog.Lookup("git_v1")
	if _, ok := m.poolOf(git); ok {
		t.Error("git_v1 has a pool, but neither its definition nor the operator asks for one")
	}
	agent, _ := m.cfg.Catalog.Lookup("claude_code_assistant_v1")
	if _, ok := m.poolOf(agent); !ok {
		t.Error("an agent worker without nested access has no pool")
	}
	nested, err := newTestManager(t, Config{PoolSizes: map[string]int{"claude_code_assistant_v1": 2}, NestedMCPURL: "http://marketplace:8080/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := nested.poolOf(agent); !ok {
		t.Error("an agent worker given nested access has no pool")
	}
}

// A pool member's hash covers the settings that went into its container:
// new credentials or a new nested URL make another hash for an agent
// worker (its members are then retired, never claimed), and change nothing
// for a worker that gets neither; labels count for every worker.
func TestMemberHashFollowsTheSettings(t *testing.T) {
	t.Parallel()
	hashes := func(cfg Config) (agent, plain string) {
		t.Helper()
		m, err := newTestManager(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := m.cfg.Catalog.Lookup("claude_code_assistant_v1")
		p, _ := m.cfg.Catalog.Lookup("filesystem_write_v1")
		return m.memberHash(a), m.memberHash(p)
	}
	base := Config{AgentEnv: []string{"ANTHROPIC_API_KEY=one"}, NestedMCPURL: "http://marketplace:8080/mcp", Labels: map[string]string{"a": "1"}}
	agent, plain := hashes(base)
	if again, _ := hashes(base); again != agent {
		t.Error("the same settings made another hash")
	}
	for name, cfg := range map[string]Config{
		"new credentials": {AgentEnv: []string{"ANTHROPIC_API_KEY=two"}, NestedMCPURL: base.NestedMCPURL, Labels: base.Labels},
		"new nested URL":  {AgentEnv: base.AgentEnv, NestedMCPURL: "http://elsewhere:8080/mcp", Labels: base.Labels},
	} {
		a, p := hashes(cfg)
		if a == agent {
			t.Errorf("%s: the agent worker's members keep their hash", name)
		}
		if p != plain {
			t.Errorf("%s: a worker that gets neither changed hash", name)
		}
	}
	if a, p := hashes(Config{AgentEnv: base.AgentEnv, NestedMCPURL: base.NestedMCPURL, Labels: map[string]string{"a": "2"}}); a == agent || p == plain {
		t.Error("new labels kept a hash")
	}
}
