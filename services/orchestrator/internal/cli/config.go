package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"
)

// envPrefix prefixes the environment variable of every flag:
// --lease-ttl is ORCHESTRATOR_LEASE_TTL.
const envPrefix = "ORCHESTRATOR_"

// envName is the environment variable of a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// noEnv are flags that take no environment variable or file key.
var noEnv = map[string]bool{"help": true, "config": true}

// annotateEnv appends each flag's environment variable to its usage, for
// --help.
func annotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if !noEnv[f.Name] {
			f.Usage += " (env " + envName(f.Name) + ")"
		}
	})
}

// resolveSettings fills in the flags the user did not set: from their
// environment variable, else from the YAML config file (--config, else
// ORCHESTRATOR_CONFIG), whose keys are the flag names (with - or _), else
// they keep their default. So the precedence is flag > env > file > default.
func resolveSettings(fs *pflag.FlagSet, getenv func(string) string) error {
	file := ""
	if f := fs.Lookup("config"); f != nil {
		file = f.Value.String()
		if !f.Changed {
			file = getenv(envName("config"))
		}
	}
	fromFile, err := readConfigFile(fs, file)
	if err != nil {
		return err
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || noEnv[f.Name] {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", envName(f.Name), err))
			}
			return
		}
		if v, ok := fromFile[f.Name]; ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", file, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// readConfigFile reads a YAML mapping of flag names to scalar values.
func readConfigFile(fs *pflag.FlagSet, file string) (map[string]string, error) {
	out := map[string]string{}
	if file == "" {
		return out, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the config file: %w", err)
	}
	var doc map[string]yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file %s: %w", file, err)
	}
	for key, node := range doc {
		name := strings.ReplaceAll(key, "_", "-")
		if fs.Lookup(name) == nil || noEnv[name] {
			var known []string
			fs.VisitAll(func(f *pflag.Flag) {
				if !noEnv[f.Name] {
					known = append(known, strings.ReplaceAll(f.Name, "-", "_"))
				}
			})
			return nil, fmt.Errorf("config file %s:%d: unknown key %q (known: %s)", file, node.Line, key, strings.Join(known, ", "))
		}
		if node.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("config file %s:%d: %s must be a single value", file, node.Line, key)
		}
		if node.Tag == "!!null" {
			continue
		}
		out[name] = node.Value
	}
	return out, nil
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
