package cli

import (
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// Precedence: flag > environment > file > default.
func TestServeConfigPrecedence(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "marketplace.yaml")
	if err := os.WriteFile(file, []byte("addr: \":7000\"\ncatalog: /from/file\ncaller: file-caller\nidle_check: 5m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MESHWORK_CATALOG": "/from/env", "MESHWORK_CALLER": "env-caller"}
	cfg := defaultServeConfig()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.bindFlags(fs)
	if err := fs.Parse([]string{"--caller", "flag-caller"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.resolve(fs, file, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != ":7000" || cfg.Catalog != "/from/env" || cfg.Caller != "flag-caller" || cfg.IdleCheck != 5*time.Minute || cfg.Transport != "stdio" {
		t.Errorf("resolved %+v", cfg)
	}
}

// The journey quotas layer like every setting, and default to 20 and 200.
func TestServeConfigQuotas(t *testing.T) {
	t.Parallel()
	resolve := func(t *testing.T, fileText string, env map[string]string, args ...string) serveConfig {
		t.Helper()
		file := ""
		if fileText != "" {
			file = filepath.Join(t.TempDir(), "marketplace.yaml")
			if err := os.WriteFile(file, []byte(fileText), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cfg := defaultServeConfig()
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		cfg.bindFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := cfg.resolve(fs, file, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := resolve(t, "", nil); cfg.MaxJourneysPerCaller != 20 || cfg.MaxJourneys != 200 {
		t.Errorf("defaults: per caller %d, total %d; want 20, 200", cfg.MaxJourneysPerCaller, cfg.MaxJourneys)
	}
	cfg := resolve(t, "max_journeys_per_caller: 3\nmax_journeys: 30\n", map[string]string{"MESHWORK_MAX_JOURNEYS": "40"})
	if cfg.MaxJourneysPerCaller != 3 || cfg.MaxJourneys != 40 {
		t.Errorf("file and env: per caller %d, total %d; want 3 (file), 40 (env)", cfg.MaxJourneysPerCaller, cfg.MaxJourneys)
	}
	cfg = resolve(t, "max_journeys: 30\n", map[string]string{"MESHWORK_MAX_JOURNEYS": "40", "MESHWORK_MAX_JOURNEYS_PER_CALLER": "4"},
		"--max-journeys", "50")
	if cfg.MaxJourneysPerCaller != 4 || cfg.MaxJourneys != 50 {
		t.Errorf("flag over env: per caller %d, total %d; want 4 (env), 50 (flag)", cfg.MaxJourneysPerCaller, cfg.MaxJourneys)
	}
}

func TestServeConfigRefusesBadInput(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		file, want string
		env        map[string]string
		args       []string
	}{
		"unknown key in file": {file: "listen_on: x\n", want: "listen_on"},
		"bad transport":       {env: map[string]string{"MESHWORK_TRANSPORT": "carrier-pigeon"}, want: `transport "carrier-pigeon"`},
		"bad duration":        {env: map[string]string{"MESHWORK_IDLE_CHECK": "soon"}, want: `MESHWORK_IDLE_CHECK="soon": not a duration`},
		"boolean yes":         {env: map[string]string{"MESHWORK_ALLOW_PROCESS_ISOLATION": "yes"}, want: `MESHWORK_ALLOW_PROCESS_ISOLATION="yes": not a boolean`},
		"boolean in file":     {file: "allow_process_isolation: sure\n", want: `allow_process_isolation: "sure": not a boolean`},
		"zero idle check":     {env: map[string]string{"MESHWORK_IDLE_CHECK": "0s"}, want: "must be positive"},
		"quota not a number":  {env: map[string]string{"MESHWORK_MAX_JOURNEYS": "ten"}, want: `MESHWORK_MAX_JOURNEYS="ten": not a whole number`},
		"quota with a unit":   {env: map[string]string{"MESHWORK_MAX_JOURNEYS_PER_CALLER": "20 "}, want: `MESHWORK_MAX_JOURNEYS_PER_CALLER="20 ": not a whole number`},
		"negative quota":      {env: map[string]string{"MESHWORK_MAX_JOURNEYS": "-1"}, want: "max-journeys must be at least 1, got -1 from MESHWORK_MAX_JOURNEYS"},
		"zero quota flag":     {args: []string{"--max-journeys-per-caller", "0"}, want: "max-journeys-per-caller must be at least 1, got 0 from --max-journeys-per-caller"},
		"quota flag word":     {args: []string{"--max-journeys=ten"}, want: "max-journeys"},
		"zero quota in file":  {file: "max_journeys: 0\n", want: "max-journeys must be at least 1, got 0 from max_journeys in "},
	} {
		path := ""
		if tc.file != "" {
			path = filepath.Join(t.TempDir(), "c.yaml")
			_ = os.WriteFile(path, []byte(tc.file), 0o600)
		}
		cfg := defaultServeConfig()
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.bindFlags(fs)
		err := fs.Parse(tc.args)
		if err == nil {
			err = cfg.resolve(fs, path, func(k string) string { return tc.env[k] })
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// Pool sizes are "worker=size" pairs; anything else is refused, naming
// where it came from.
func TestServeConfigPoolSizes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  string
		want map[string]int
		err  string
	}{
		{"", map[string]int{}, ""},
		{"shell_v1=2, git_v1=0", map[string]int{"shell_v1": 2, "git_v1": 0}, ""},
		{"shell_v1", nil, `pool-sizes "shell_v1" (from MESHWORK_POOL_SIZES): "shell_v1" is not worker=size with a size of 0 or more`},
		{"shell_v1=-1", nil, `"shell_v1=-1" is not worker=size`},
		{"=3", nil, `"=3" is not worker=size`},
	} {
		cfg := defaultServeConfig()
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		cfg.bindFlags(fs)
		err := cfg.resolve(fs, "", func(k string) string {
			if k == "MESHWORK_POOL_SIZES" {
				return tc.env
			}
			return ""
		})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want %q", tc.env, err, tc.err)
			}
			continue
		}
		got, perr := parsePoolSizes(cfg.PoolSizes)
		if err != nil || perr != nil || !maps.Equal(got, tc.want) {
			t.Errorf("%q: %v (%v %v), want %v", tc.env, got, err, perr, tc.want)
		}
	}
	if cfg := defaultServeConfig(); cfg.MaxPoolMembers != 16 {
		t.Errorf("max-pool-members defaults to %d, want 16", cfg.MaxPoolMembers)
	}
}

// docs/pools.md's table of settings names real flags, their environment
// variables and their defaults.
func TestPoolDocsMatchTheFlags(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../../docs/pools.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultServeConfig()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.bindFlags(fs)
	rows := 0
	for line := range strings.Lines(string(doc)) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) < 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		rows++
		name := strings.Trim(strings.TrimSpace(cells[1]), "`-")
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("docs/pools.md names --%s, which marketplace serve does not have", name)
			continue
		}
		if env := strings.Trim(strings.TrimSpace(cells[2]), "`"); env != layers.EnvName(name) {
			t.Errorf("docs/pools.md: --%s's environment variable is %s, not %s", name, layers.EnvName(name), env)
		}
		def := strings.TrimSpace(cells[3])
		if def == "none" {
			def = ""
		}
		if def != f.DefValue {
			t.Errorf("docs/pools.md: --%s defaults to %q, not %q", name, f.DefValue, def)
		}
	}
	if rows != 2 {
		t.Errorf("docs/pools.md's settings table has %d rows, want 2", rows)
	}
}
