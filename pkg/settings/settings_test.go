package settings_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/meshwork/meshwork/pkg/settings"
)

var layers = settings.Layers{Prefix: "SVC_", ConfigFlag: "config"}

type values struct {
	addr    string
	on      bool
	every   time.Duration
	workers int
}

func parse(t *testing.T, args []string, env map[string]string, file string) (values, settings.Sources, error) {
	t.Helper()
	var v values
	fs := pflag.NewFlagSet("svc", pflag.ContinueOnError)
	fs.String("config", "", "config file")
	fs.StringVar(&v.addr, "addr", ":80", "address")
	fs.BoolVar(&v.on, "allow-things", false, "a switch")
	fs.DurationVar(&v.every, "idle-check", time.Minute, "a period")
	fs.IntVar(&v.workers, "max-workers", 4, "a count")
	if file != "" {
		path := filepath.Join(t.TempDir(), "svc.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	src, err := layers.Resolve(fs, func(k string) string { return env[k] })
	return v, src, err
}

// A flag wins over the environment, which wins over the file, which wins
// over the default; Sources says which gave each value.
func TestPrecedence(t *testing.T) {
	t.Parallel()
	v, src, err := parse(t, []string{"--max-workers", "9"},
		map[string]string{"SVC_MAX_WORKERS": "8", "SVC_IDLE_CHECK": "2m"},
		"max_workers: 7\nidle-check: 3m\nallow_things: true\n")
	if err != nil {
		t.Fatal(err)
	}
	if v.workers != 9 || v.every != 2*time.Minute || !v.on || v.addr != ":80" {
		t.Errorf("resolved %+v", v)
	}
	if src.Of("max-workers") != "--max-workers" || src.Of("idle-check") != "SVC_IDLE_CHECK" ||
		!strings.HasPrefix(src.Of("allow-things"), "allow_things in ") || src.Of("addr") != "the default" {
		t.Errorf("sources %v", src)
	}
}

// A malformed value is refused with the setting, the value and where it
// came from; "yes" is no boolean.
func TestRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		file string
		want []string
	}{
		{"boolean in env", map[string]string{"SVC_ALLOW_THINGS": "yes"}, "", []string{`SVC_ALLOW_THINGS="yes": not a boolean`}},
		{"duration in env", map[string]string{"SVC_IDLE_CHECK": "5 minutes"}, "", []string{`SVC_IDLE_CHECK="5 minutes": not a duration`}},
		{"number in env", map[string]string{"SVC_MAX_WORKERS": "8 "}, "", []string{`SVC_MAX_WORKERS="8 ": not a whole number`}},
		{"boolean in file", nil, "allow_things: sure\n", []string{`:1: allow_things: "sure": not a boolean`}},
		{"all at once", map[string]string{"SVC_ALLOW_THINGS": "on", "SVC_MAX_WORKERS": "many"}, "", []string{"SVC_ALLOW_THINGS", "SVC_MAX_WORKERS"}},
		{"unknown key", nil, "max_wrokers: 3\n", []string{`unknown key "max_wrokers"`, "max_workers"}},
		{"not a scalar", nil, "addr: [a, b]\n", []string{"addr must be a single value"}},
		{"config key", nil, "config: other.yaml\n", []string{`unknown key "config"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(t, nil, tc.env, tc.file)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want one saying %q", err, w)
				}
			}
		})
	}
}

func TestTableAndSyncDoc(t *testing.T) {
	t.Parallel()
	l := settings.Layers{Prefix: "X_", ConfigFlag: "config", Skip: []string{"caller"}}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.String("config", "", "")
	fs.String("caller", "local", "the stdio caller")
	fs.Duration("idle", 2*time.Minute, "close | after this")
	fs.Bool("fast", false, "go fast")
	l.Annotate(fs)
	table := l.Table(fs)
	for _, row := range []string{
		"| `--config` | `X_CONFIG` | none | YAML file of these settings |",
		"| `--caller` | none | `local` | the stdio caller |",
		"| `--idle` | `X_IDLE` | `2m0s` | close \\| after this |",
		"| `--fast` | `X_FAST` | `false` | go fast |",
	} {
		if !strings.Contains(table, row+"\n") {
			t.Errorf("the table has no row %s:\n%s", row, table)
		}
	}

	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Settings\n\n<!-- settings:serve -->\nold\n<!-- /settings:serve -->\n\nAfter.\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := settings.SyncDoc(path, "serve", table, false); err == nil || !strings.Contains(err.Error(), "-update") {
		t.Errorf("an out-of-date doc: %v", err)
	}
	if err := settings.SyncDoc(path, "serve", table, true); err != nil {
		t.Fatal(err)
	}
	if err := settings.SyncDoc(path, "serve", table, false); err != nil {
		t.Errorf("after the update: %v", err)
	}
	got, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(got), "# Settings\n\n<!-- settings:serve -->\n| Flag") || !strings.HasSuffix(string(got), "<!-- /settings:serve -->\n\nAfter.\n") {
		t.Errorf("the doc after the update:\n%s", got)
	}
	if err := settings.SyncDoc(path, "other", table, true); err == nil {
		t.Error("a doc without the markers was accepted")
	}
}
