package cli

import (
	"github.com/spf13/pflag"

	"github.com/meshwork/meshwork/pkg/settings"
)

// layers is how the orchestrator's flags take their values: flag >
// ORCHESTRATOR_<FLAG> > the YAML file of --config (or ORCHESTRATOR_CONFIG)
// > default.
var layers = settings.Layers{Prefix: "ORCHESTRATOR_", ConfigFlag: "config"}

// resolveSettings fills in the flags the user did not set (package
// settings).
func resolveSettings(fs *pflag.FlagSet, getenv func(string) string) error {
	_, err := layers.Resolve(fs, getenv)
	return err
}
