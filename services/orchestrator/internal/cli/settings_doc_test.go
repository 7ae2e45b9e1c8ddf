package cli

import (
	"flag"
	"testing"

	"github.com/spf13/pflag"

	"github.com/meshwork/meshwork/pkg/settings"
)

var updateDocs = flag.Bool("update", false, "rewrite the settings table in docs/orchestrator.md")

// The settings table of docs/orchestrator.md is the code's: every flag, its
// environment variable, its default and its meaning.
func TestSettingsDoc(t *testing.T) {
	var cfg serveConfig
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.bindFlags(fs)
	if err := settings.SyncDoc("../../../../docs/orchestrator.md", "orchestrator serve", layers.Table(fs), *updateDocs); err != nil {
		t.Error(err)
	}
}
