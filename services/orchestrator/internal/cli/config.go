package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

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

// loadTokens reads the API's bearer tokens, caller → token, from envValue
// ("caller=token,caller2=token2") and the tokens file (one "caller token"
// or "caller=token" per line; blank lines and # comments are skipped).
func loadTokens(envValue, file string) (map[string]string, error) {
	tokens := map[string]string{}
	add := func(caller, token, where string) error {
		caller, token = strings.TrimSpace(caller), strings.TrimSpace(token)
		if caller == "" || token == "" {
			return fmt.Errorf("%s: want caller=token", where)
		}
		if _, dup := tokens[caller]; dup {
			return fmt.Errorf("%s: caller %s has a token already", where, caller)
		}
		tokens[caller] = token
		return nil
	}
	for i, pair := range strings.Split(envValue, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		caller, token, _ := strings.Cut(pair, "=")
		if err := add(caller, token, fmt.Sprintf("ORCHESTRATOR_TOKENS entry %d", i+1)); err != nil {
			return nil, err
		}
	}
	if file == "" {
		return tokens, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading the tokens file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		caller, token, ok := strings.Cut(line, "=")
		if !ok {
			fields := strings.Fields(line)
			if len(fields) != 2 {
				return nil, fmt.Errorf("%s:%d: want \"caller token\" or \"caller=token\"", file, n)
			}
			caller, token = fields[0], fields[1]
		}
		if err := add(caller, token, fmt.Sprintf("%s:%d", file, n)); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the tokens file: %w", err)
	}
	return tokens, nil
}
