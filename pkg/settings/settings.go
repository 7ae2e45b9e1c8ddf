// Package settings layers a Meshwork command's settings, the same way in
// every service: a flag the user gave wins; else the flag's environment
// variable (a prefix and the flag's name in upper case, - as _: --lease-ttl
// of the orchestrator is ORCHESTRATOR_LEASE_TTL); else its key in the YAML
// config file (the flag's name, with - or _); else its default. Every value
// is parsed by the flag's own type, strictly (a boolean is true or false,
// never "yes"), and every refusal names the setting and where its value
// came from.
package settings

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"
)

// Layers describes a command's layering.
type Layers struct {
	// Prefix starts every environment variable: "MESHWORK_".
	Prefix string
	// ConfigFlag is the flag that names the YAML config file ("config"),
	// also read from its environment variable; empty for no file.
	ConfigFlag string
	// Skip are flags with neither environment variable nor file key
	// (besides help and ConfigFlag).
	Skip []string
}

// EnvName is a flag's environment variable.
func (l Layers) EnvName(flag string) string {
	return l.Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func (l Layers) skipped(flag string) bool {
	return flag == "help" || flag == l.ConfigFlag || slices.Contains(l.Skip, flag)
}

// Annotate appends each flag's environment variable to its usage, for
// --help.
func (l Layers) Annotate(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if !l.skipped(f.Name) {
			f.Usage += " (env " + l.EnvName(f.Name) + ")"
		}
	})
}

// Sources says where each flag's value came from: "--flag", its
// environment variable, "key in FILE", or "the default".
type Sources map[string]string

// Of is where flag's value came from.
func (s Sources) Of(flag string) string {
	if from, ok := s[flag]; ok {
		return from
	}
	return "the default"
}

// Resolve fills in the flags the user did not set, from the environment,
// then from the config file that ConfigFlag (or its environment variable)
// names. It reports every bad value at once.
func (l Layers) Resolve(fs *pflag.FlagSet, getenv func(string) string) (Sources, error) {
	file := ""
	if l.ConfigFlag != "" {
		if f := fs.Lookup(l.ConfigFlag); f != nil && f.Changed {
			file = f.Value.String()
		} else {
			file = getenv(l.EnvName(l.ConfigFlag))
		}
	}
	return l.ResolveFile(fs, file, getenv)
}

// ResolveFile is Resolve with the config file given ("" for none).
func (l Layers) ResolveFile(fs *pflag.FlagSet, file string, getenv func(string) string) (Sources, error) {
	fromFile, err := l.readFile(fs, file)
	if err != nil {
		return nil, err
	}
	sources := Sources{}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		switch {
		case l.skipped(f.Name):
		case f.Changed:
			sources[f.Name] = "--" + f.Name
		case getenv(l.EnvName(f.Name)) != "":
			env, v := l.EnvName(f.Name), getenv(l.EnvName(f.Name))
			sources[f.Name] = env
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %s", env, v, describe(f, err)))
			}
		default:
			v, ok := fromFile[f.Name]
			if !ok {
				return
			}
			sources[f.Name] = v.key + " in " + file
			if err := f.Value.Set(v.value); err != nil {
				errs = append(errs, fmt.Errorf("config file %s:%d: %s: %q: %s", file, v.line, v.key, v.value, describe(f, err)))
			}
		}
	})
	return sources, errors.Join(errs...)
}

// describe says what is wrong with a value refused by f's type.
func describe(f *pflag.Flag, err error) string {
	switch f.Value.Type() {
	case "bool":
		return "not a boolean: use true or false"
	case "duration":
		return "not a duration: use a number with a unit, such as 90s, 5m or 1h"
	case "int", "int64", "int32", "uint", "uint64":
		return "not a whole number"
	case "float64", "float32":
		return "not a number"
	}
	return err.Error()
}

type fileValue struct {
	key, value string
	line       int
}

// readFile reads a YAML mapping of flag names to single values.
func (l Layers) readFile(fs *pflag.FlagSet, file string) (map[string]fileValue, error) {
	out := map[string]fileValue{}
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
		if fs.Lookup(name) == nil || l.skipped(name) {
			var known []string
			fs.VisitAll(func(f *pflag.Flag) {
				if !l.skipped(f.Name) {
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
		out[name] = fileValue{key: key, value: node.Value, line: node.Line}
	}
	return out, nil
}
