package backend

import (
	"path/filepath"
	"strings"

	"github.com/meshwork/meshwork/pkg/textcut"
)

// maxVerbDetail bounds what a verb quotes of a command or pattern.
const maxVerbDetail = 80

// ToolVerb says in a few words what a tool call does, for people following
// a run: "Editing main.go", "Running go test ./...". Paths inside dir (the
// agent's repository) are shown relative to it. Tool names are Claude
// Code's; others read "Using <tool>".
func ToolVerb(tool string, input map[string]any, dir string) string {
	str := func(k string) string {
		s, _ := input[k].(string)
		return s
	}
	file := func(k string) string {
		p := str(k)
		if dir != "" && filepath.IsAbs(p) {
			if rel, err := filepath.Rel(dir, p); err == nil && !strings.HasPrefix(rel, "..") {
				p = rel
			}
		}
		return short(p)
	}
	switch tool {
	case "Read":
		return "Reading " + file("file_path")
	case "Write":
		return "Writing " + file("file_path")
	case "Edit", "MultiEdit":
		return "Editing " + file("file_path")
	case "NotebookEdit":
		return "Editing notebook " + file("notebook_path")
	case "Bash":
		return "Running " + short(str("command"))
	case "Glob":
		return "Finding files " + short(str("pattern"))
	case "Grep":
		return "Searching for " + short(str("pattern"))
	case "WebFetch":
		return "Fetching " + short(str("url"))
	case "WebSearch":
		return "Searching the web for " + short(str("query"))
	}
	if rest, ok := strings.CutPrefix(tool, "mcp__"); ok {
		if server, name, ok := strings.Cut(rest, "__"); ok {
			return "Calling " + name + " on " + server
		}
	}
	return "Using " + tool
}

// short cuts s to one line of at most maxVerbDetail bytes.
func short(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return textcut.Clip(s, maxVerbDetail, "…")
}
