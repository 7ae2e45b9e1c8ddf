package cli

import (
	"flag"
	"log/slog"
	"testing"

	"github.com/meshwork/meshwork/pkg/settings"
)

var updateDocs = flag.Bool("update", false, "rewrite the settings table in docs/mesh-exec.md")

// The settings table of docs/mesh-exec.md is the code's: every flag, its
// environment variable, its default and its meaning.
func TestSettingsDoc(t *testing.T) {
	fs := newServeCommand(slog.New(slog.DiscardHandler)).Flags()
	if err := settings.SyncDoc("../../../../docs/mesh-exec.md", "mesh-exec serve", layers.Table(fs), *updateDocs); err != nil {
		t.Error(err)
	}
}
