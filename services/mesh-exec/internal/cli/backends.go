package cli

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/claude"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/command"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend/jsonstream"
)

func backendNames() []string { return []string{"claude", "codex", "opencode", "gemini", "command"} }

// commandFlags configure the command backend (an agent CLI we do not know).
type commandFlags struct {
	argv, resumeArgv, output string
}

// newBackends builds every backend; binary overrides the default one's CLI.
// The command backend exists only when its argv template is given.
func newBackends(def, binary string, cf commandFlags) (map[string]backend.Backend, error) {
	if !slices.Contains(backendNames(), def) {
		return nil, fmt.Errorf("backend %q is not one of %v", def, backendNames())
	}
	bin := func(name string) string {
		if name == def {
			return binary
		}
		return ""
	}
	out := map[string]backend.Backend{"claude": claude.New(claude.Config{Binary: bin("claude")})}
	for _, cli := range jsonstream.CLIs() {
		out[cli.Name] = jsonstream.New(cli, bin(cli.Name))
	}
	if cf.argv != "" {
		var cfg command.Config
		if err := json.Unmarshal([]byte(cf.argv), &cfg.Argv); err != nil {
			return nil, fmt.Errorf("--command-argv: want a JSON list of strings, e.g. [\"my-agent\", \"--prompt\", \"{task}\"]: %w", err)
		}
		if cf.resumeArgv != "" {
			if err := json.Unmarshal([]byte(cf.resumeArgv), &cfg.ResumeArgv); err != nil {
				return nil, fmt.Errorf("--command-resume-argv: want a JSON list of strings: %w", err)
			}
		}
		cfg.Output = cf.output
		b := command.New(cfg)
		if err := b.Err(); err != nil {
			return nil, fmt.Errorf("command backend: %w", err)
		}
		out["command"] = b
	} else if def == "command" {
		return nil, fmt.Errorf("backend command needs --command-argv")
	}
	return out, nil
}
