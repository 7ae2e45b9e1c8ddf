package cli

import (
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

func TestServeConfigRefusesBadInput(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		file, want string
		env        map[string]string
	}{
		"unknown key in file": {file: "listen_on: x\n", want: "listen_on"},
		"bad transport":       {env: map[string]string{"MESHWORK_TRANSPORT": "carrier-pigeon"}, want: `transport "carrier-pigeon"`},
		"bad duration":        {env: map[string]string{"MESHWORK_IDLE_CHECK": "soon"}, want: "MESHWORK_IDLE_CHECK"},
		"zero idle check":     {env: map[string]string{"MESHWORK_IDLE_CHECK": "0s"}, want: "must be positive"},
	} {
		path := ""
		if tc.file != "" {
			path = filepath.Join(t.TempDir(), "c.yaml")
			_ = os.WriteFile(path, []byte(tc.file), 0o600)
		}
		cfg := defaultServeConfig()
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		cfg.bindFlags(fs)
		err := cfg.resolve(fs, path, func(k string) string { return tc.env[k] })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens")
	_ = os.WriteFile(file, []byte("# callers\nbob bob-token-0123456789abcdef\n"), 0o600)
	got, err := loadTokens("alice=alice-token-0123456789ab", file)
	if err != nil || got["alice-token-0123456789ab"] != "alice" || got["bob-token-0123456789abcdef"] != "bob" {
		t.Errorf("tokens %v, %v", got, err)
	}
	for _, bad := range []string{"alice=short", "=no-caller-token-0123456789", "a=same-token-0123456789,b=same-token-0123456789"} {
		if _, err := loadTokens(bad, ""); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
