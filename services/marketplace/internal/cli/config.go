package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/settings"

	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// serveConfig is `marketplace serve`'s configuration. Precedence: flag >
// environment (MESHWORK_*) > config file (--config, YAML with these keys) >
// default.
type serveConfig struct {
	// Transport is stdio or http. Defaults to stdio.
	Transport string
	// Addr is the HTTP listen address. Defaults to :8080.
	Addr string
	// Catalog is a directory of worker definitions. Defaults to the built-in catalog.
	Catalog string
	// TokensFile holds bearer tokens, besides MESHWORK_TOKENS (package
	// bearer has the format).
	TokensFile string
	// Caller is the identity of the stdio client. Defaults to "local".
	Caller string
	// Delegates are the callers that may act on behalf of another caller
	// (the orchestrator, for its console), "caller,caller". Defaults to
	// none.
	Delegates string
	// ArchiveDir receives stop_worker archives. Defaults to $TMPDIR/meshwork-archives.
	ArchiveDir string
	// AllowProcessIsolation enables isolation_level process (no container; development only). Defaults to false.
	AllowProcessIsolation bool
	// ProcessStateDir holds process-isolated workspaces. Defaults to $TMPDIR/meshwork-process.
	ProcessStateDir string
	// Meshworker is the meshworker binary process isolation runs. Defaults to "meshworker" beside the marketplace binary.
	Meshworker string
	// IdleCheck is how often idle workers and abandoned spawns are looked
	// for. Defaults to 1m.
	IdleCheck time.Duration
	// ChannelIdle is how long a channel to a worker stays open unused.
	// Defaults to 2m.
	ChannelIdle time.Duration
	// Labels are extra labels on every worker container, "k=v,k=v". Defaults to none.
	Labels string
	// NestedMCPURL is this marketplace's MCP URL as agent containers reach
	// it; set, agents can spawn nested workers. Defaults to none.
	NestedMCPURL string
	// BaseDir holds the marketplace's record of each journey's base (what its
	// workspace started from). Defaults to $TMPDIR/meshwork-bases.
	BaseDir string
	// SourceHosts are the https hosts spawn_worker's git sources may name,
	// "host,host:port". Defaults to none.
	SourceHosts string
	// SourceRoots are the local directories git sources may name,
	// "dir,dir". Defaults to none.
	SourceRoots string
	// SourceCredentialsFile holds credentials for private source hosts, one
	// "HOST USERNAME PASSWORD [CALLER,CALLER...]" per line. Defaults to none.
	SourceCredentialsFile string
	// SourceCAFile is extra PEM certificates to trust for source hosts.
	// Defaults to the system's roots only.
	SourceCAFile string
	// MaxJourneysPerCaller is the most live journeys (holding a worker) one
	// caller may have; at least 1. Defaults to 20.
	MaxJourneysPerCaller int
	// MaxJourneys is the most live journeys of all callers together; at
	// least 1. Defaults to 200.
	MaxJourneys int
	// MaxRunningActions is how many actions (and spawns, diffs, exports,
	// stops with patch) this marketplace runs at once: each holds a
	// database connection for its journey's lock while it runs. At least 1.
	// Defaults to 32.
	MaxRunningActions int
	// EgressProxyAddr is where the egress proxy of egress workers listens;
	// it must be reachable from the egress network (workers are told the
	// port it got). It serves only the addresses of egress workers. Empty
	// turns it off (egress workers are then refused). Defaults to :0, a
	// free port on every interface.
	EgressProxyAddr string
	// EgressNetwork is the internal Docker network egress workers join.
	// Defaults to meshwork-egress.
	EgressNetwork string
	// EgressProxyHost is the proxy's host as egress workers reach it.
	// Defaults to the egress network's gateway (a marketplace on the host).
	EgressProxyHost string
	// EgressNoProxy is egress workers' NO_PROXY: what they reach on the
	// egress network itself. Defaults to localhost,127.0.0.1.
	EgressNoProxy string
	// EgressJoin, for a marketplace in a container, joins that container to
	// the egress network (creating it) under this alias at start, so egress
	// workers reach the proxy there. Defaults to none (a marketplace on the
	// host is reached at the network's gateway).
	EgressJoin string
	// PoolSizes overrides the definitions' warm pool sizes, "worker=size,..."
	// (0 turns a definition's pool off). Defaults to none.
	PoolSizes string
	// MaxPoolMembers bounds all warm pools' members together. Defaults to 16.
	MaxPoolMembers int
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		Transport: "stdio", Addr: ":8080", Caller: "local", IdleCheck: time.Minute, ChannelIdle: journeys.DefaultChannelIdle,
		MaxJourneysPerCaller: journeys.DefaultMaxJourneysPerCaller, MaxJourneys: journeys.DefaultMaxJourneys,
		MaxRunningActions: store.DefaultLockConns,
		EgressProxyAddr:   ":0", EgressNetwork: journeys.DefaultEgressNetwork,
		MaxPoolMembers: journeys.DefaultMaxPoolMembers,
	}
}

// configField binds one setting to its flag; its environment variable and
// config file key follow from the flag's name (package settings).
type configField struct {
	flag, usage string
	str         *string
	boolean     *bool
	dur         *time.Duration
	// num is a whole number of at least 1.
	num *int
}

// layers is how the marketplace's flags take their values: flag >
// MESHWORK_<FLAG> > the YAML file of --config > default.
var layers = settings.Layers{Prefix: "MESHWORK_", ConfigFlag: "config"}

func (c *serveConfig) fields() []configField {
	return []configField{
		{flag: "transport", usage: "stdio or http", str: &c.Transport},
		{flag: "addr", usage: "HTTP listen address", str: &c.Addr},
		{flag: "catalog", usage: "catalog directory of worker definitions (default: built-in)", str: &c.Catalog},
		{flag: "tokens-file", usage: `bearer tokens file, one "caller token" or "caller=token" per line (besides MESHWORK_TOKENS)`, str: &c.TokensFile},
		{flag: "caller", usage: "identity of the stdio client", str: &c.Caller},
		{flag: "delegates", usage: `callers that may act on behalf of another caller, naming it in _meta "meshwork/on_behalf_of" (the orchestrator, for its console), "caller,caller"`, str: &c.Delegates},
		{flag: "archive-dir", usage: "where stop_worker archive writes tarballs", str: &c.ArchiveDir},
		{flag: "allow-process-isolation", usage: "allow isolation_level process: NO container isolation, development only", boolean: &c.AllowProcessIsolation},
		{flag: "process-state-dir", usage: "workspaces of process-isolated workers", str: &c.ProcessStateDir},
		{flag: "meshworker", usage: "meshworker binary for process isolation", str: &c.Meshworker},
		{flag: "idle-check", usage: "how often to stop idle workers and sweep abandoned spawns", dur: &c.IdleCheck},
		{flag: "channel-idle", usage: "close a journey's channel to its worker (its server process) after this long unused; the next action reopens it", dur: &c.ChannelIdle},
		{flag: "labels", usage: `extra labels on worker containers, "k=v,k=v"`, str: &c.Labels},
		{flag: "nested-mcp-url", usage: "this marketplace's /mcp URL as agent containers reach it (enables nested workers)", str: &c.NestedMCPURL},
		{flag: "base-dir", usage: "where the marketplace records what each workspace started from (default $TMPDIR/meshwork-bases)", str: &c.BaseDir},
		{flag: "source-hosts", usage: `https hosts git sources may name, "host,host:port"`, str: &c.SourceHosts},
		{flag: "source-roots", usage: `local directories git sources may name, "dir,dir"`, str: &c.SourceRoots},
		{flag: "source-credentials-file", usage: `credentials for private source hosts, "HOST USERNAME PASSWORD [CALLER,CALLER...]" per line`, str: &c.SourceCredentialsFile},
		{flag: "source-ca-file", usage: "extra PEM certificates to trust for source hosts", str: &c.SourceCAFile},
		{flag: "max-journeys-per-caller", usage: "most live journeys (holding a worker) one caller may have; spawns past it are refused", num: &c.MaxJourneysPerCaller},
		{flag: "max-journeys", usage: "most live journeys of all callers together, in the database every replica shares", num: &c.MaxJourneys},
		{flag: "max-running-actions", usage: "most actions this marketplace runs at once, each holding a database connection (its journey's lock); more wait", num: &c.MaxRunningActions},
		{flag: "egress-proxy-addr", usage: "where the egress proxy listens, reachable from the egress network (empty: off, egress workers refused)", str: &c.EgressProxyAddr},
		{flag: "egress-network", usage: "the internal Docker network of egress workers (meshwork-...), created when missing", str: &c.EgressNetwork},
		{flag: "egress-proxy-host", usage: "the egress proxy's host as egress workers reach it (default: the egress network's gateway)", str: &c.EgressProxyHost},
		{flag: "egress-no-proxy", usage: "egress workers' NO_PROXY: hosts on the egress network itself (default localhost,127.0.0.1)", str: &c.EgressNoProxy},
		{flag: "egress-join", usage: "in a container: join it to the egress network under this alias at start, as the proxy's host (default: no)", str: &c.EgressJoin},
		{flag: "pool-sizes", usage: `warm pool sizes by worker, overriding the definitions' pool.size, "worker=size,worker=size" (0: no pool)`, str: &c.PoolSizes},
		{flag: "max-pool-members", usage: "most warm pool members of all workers together (started workers no journey holds yet)", num: &c.MaxPoolMembers},
	}
}

func (c *serveConfig) bindFlags(fs *pflag.FlagSet) {
	for _, f := range c.fields() {
		usage := f.usage + " (env " + layers.EnvName(f.flag) + ")"
		switch {
		case f.str != nil:
			fs.StringVar(f.str, f.flag, *f.str, usage)
		case f.boolean != nil:
			fs.BoolVar(f.boolean, f.flag, *f.boolean, usage)
		case f.dur != nil:
			fs.DurationVar(f.dur, f.flag, *f.dur, usage)
		case f.num != nil:
			fs.IntVar(f.num, f.flag, *f.num, usage)
		}
	}
}

// resolve fills in the flags the user did not set from the environment and
// the config file (package settings), then checks the values.
func (c *serveConfig) resolve(fs *pflag.FlagSet, file string, getenv func(string) string) error {
	from, err := layers.ResolveFile(fs, file, getenv)
	if err != nil {
		return err
	}
	if c.Transport != "stdio" && c.Transport != "http" {
		return fmt.Errorf("transport %q (from %s) is not one of stdio, http", c.Transport, from.Of("transport"))
	}
	if c.IdleCheck <= 0 {
		return fmt.Errorf("idle-check %s (from %s) must be positive", c.IdleCheck, from.Of("idle-check"))
	}
	if c.ChannelIdle <= 0 {
		return fmt.Errorf("channel-idle %s (from %s) must be positive", c.ChannelIdle, from.Of("channel-idle"))
	}
	for _, f := range c.fields() {
		if f.num != nil && *f.num < 1 {
			return fmt.Errorf("%s must be at least 1, got %d from %s", f.flag, *f.num, from.Of(f.flag))
		}
	}
	for _, d := range splitList(c.Delegates) {
		if !bearer.ValidCaller(d) {
			return fmt.Errorf("delegates %q (from %s): %q is not a caller's name", c.Delegates, from.Of("delegates"), d)
		}
	}
	if _, err := parsePoolSizes(c.PoolSizes); err != nil {
		return fmt.Errorf("pool-sizes %q (from %s): %w", c.PoolSizes, from.Of("pool-sizes"), err)
	}
	return nil
}

// parsePoolSizes reads "worker=size,worker=size"; the workers are checked
// against the catalog when the marketplace starts.
func parsePoolSizes(s string) (map[string]int, error) {
	pairs, err := parsePairs(s, "worker=size with a size of 0 or more")
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(pairs))
	for _, p := range pairs {
		n, err := strconv.Atoi(p.value)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not worker=size with a size of 0 or more", p.key+"="+p.value)
		}
		out[p.key] = n
	}
	return out, nil
}

// parseLabels reads "k=v,k=v".
func parseLabels(s string) (map[string]string, error) {
	pairs, err := parsePairs(s, "k=v")
	if err != nil {
		return nil, fmt.Errorf("label %w", err)
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		out[p.key] = p.value
	}
	return out, nil
}

// pair is one key=value of a list setting.
type pair struct{ key, value string }

// parsePairs reads "k=v,k=v" in order, white space around keys and values
// trimmed and empty items skipped. An item without "=" or without a key is
// refused as not being form, such as "k=v".
func parsePairs(s, form string) ([]pair, error) {
	var out []pair
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("%q is not %s", kv, form)
		}
		out = append(out, pair{k, strings.TrimSpace(v)})
	}
	return out, nil
}

// sourcePolicy builds what spawn_worker sources may be from the settings.
func (c *serveConfig) sourcePolicy() (source.Policy, error) {
	var p source.Policy
	for _, h := range splitList(c.SourceHosts) {
		if strings.ContainsAny(h, "/@ ") {
			return p, fmt.Errorf("source-hosts: %q is not a host or host:port", h)
		}
		p.Hosts = append(p.Hosts, source.NormalizeHost(h))
	}
	p.Roots = splitList(c.SourceRoots)
	if err := p.CheckRoots(); err != nil {
		return p, fmt.Errorf("source-roots: %w", err)
	}
	if c.SourceCredentialsFile != "" {
		data, err := os.ReadFile(c.SourceCredentialsFile)
		if err != nil {
			return p, fmt.Errorf("source-credentials-file: %w", err)
		}
		if p.Credentials, err = source.ParseCredentials(data); err != nil {
			return p, fmt.Errorf("source-credentials-file %s: %w", c.SourceCredentialsFile, err)
		}
	}
	if c.SourceCAFile != "" {
		data, err := os.ReadFile(c.SourceCAFile)
		if err != nil {
			return p, fmt.Errorf("source-ca-file: %w", err)
		}
		p.CABundle = data
	}
	return p, nil
}

// splitList reads "a,b,c", dropping empty items.
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
