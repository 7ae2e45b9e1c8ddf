package claude

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/backend"
)

// uuidRE matches a UUID in its canonical text form. Claude Code names every
// session with one, and --session-id requires one ("must be a valid UUID"),
// so anything else in SessionID is refused before it reaches argv.
var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// subcommands are the names `claude --help` lists as commands (plus the
// implicit "help"). The CLI's argument parser (commander) dispatches to a
// subcommand when the first positional argument is its name, even after
// "--", so a task that is exactly one of these would run, say, `claude
// update` instead of a prompt.
var subcommands = map[string]bool{
	"agents": true, "attach": true, "auth": true, "auto-mode": true, "doctor": true,
	"gateway": true, "help": true, "import": true, "install": true, "kill": true,
	"logs": true, "mcp": true, "plugin": true, "plugins": true, "purge": true,
	"respawn": true, "rm": true, "setup-token": true, "stop": true,
	"ultrareview": true, "update": true, "upgrade": true,
}

// Command returns the argv of a run. It refuses a request with an empty
// task, a session id that is not a UUID, a negative MaxTurns or an empty
// tool name.
func (b *Backend) Command(req backend.Request) ([]string, error) {
	if strings.TrimSpace(req.Task) == "" {
		return nil, errors.New("claude: the task is empty")
	}
	if req.SessionID != "" && !uuidRE.MatchString(req.SessionID) {
		return nil, fmt.Errorf("claude: session id %q is not a UUID; Claude Code session ids are UUIDs, as returned by an earlier run", req.SessionID)
	}
	if req.MaxTurns < 0 {
		return nil, fmt.Errorf("claude: max turns %d is negative", req.MaxTurns)
	}
	for _, tool := range req.AllowedTools {
		if strings.TrimSpace(tool) == "" {
			return nil, errors.New("claude: an allowed tool name is empty")
		}
	}

	argv := []string{b.cfg.Binary, "-p", "--output-format", "stream-json", "--verbose"}
	if req.SessionID != "" {
		argv = append(argv, "--resume", req.SessionID)
		if req.ForkSession {
			argv = append(argv, "--fork-session")
		}
	}
	if req.Model != "" {
		argv = append(argv, "--model", req.Model)
	}
	if req.MaxTurns > 0 {
		argv = append(argv, "--max-turns", strconv.Itoa(req.MaxTurns))
	}
	if len(req.AllowedTools) > 0 {
		// One comma-separated value: --allowedTools is variadic, and a
		// single element cannot take anything that follows it by mistake.
		argv = append(argv, "--allowedTools", strings.Join(req.AllowedTools, ","))
	}
	if req.AppendSystemPrompt != "" {
		argv = append(argv, "--append-system-prompt", req.AppendSystemPrompt)
	}
	if req.MCPConfig != "" {
		argv = append(argv, "--mcp-config", req.MCPConfig)
	}
	if req.HookSettings != "" {
		// A JSON string, not a file. --settings adds a layer on top of the
		// settings files, so the repository's own (.claude/settings.json,
		// settings.local.json), which the agent could write to turn the
		// hooks off, are not loaded at all; the user's live under the
		// agent's home in .meshwork/, which the gate keeps it from writing.
		argv = append(argv, "--settings", req.HookSettings, "--setting-sources", "user", "--include-hook-events")
	}
	task := req.Task
	if subcommands[task] {
		// A trailing newline changes nothing for the model and keeps the
		// parser from taking the task for a subcommand.
		task += "\n"
	}
	return append(argv, "--", task), nil
}
