package cli

import (
	"flag"
	"testing"

	"github.com/spf13/pflag"

	"github.com/meshwork/meshwork/pkg/settings"
)

var updateDocs = flag.Bool("update", false, "rewrite the settings table in docs/marketplace.md")

// The settings table of docs/marketplace.md is the code's: every flag, its
// environment variable, its default and its meaning.
func TestSettingsDoc(t *testing.T) {
	cfg := defaultServeConfig()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	cfg.bindFlags(fs)
	if err := settings.SyncDoc("../../../../docs/marketplace.md", "marketplace serve", layers.Table(fs), *updateDocs); err != nil {
		t.Error(err)
	}
}
