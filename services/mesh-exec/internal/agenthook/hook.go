package agenthook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/meshwork/meshwork/pkg/gate"
)

// maxEventBytes bounds the event a hook reads: a Write's content is in it,
// and max_file_size is at most a few MiB in practice.
const maxEventBytes = 64 << 20

// input is the JSON Claude Code writes on a hook's stdin: the common fields
// and those of the events mesh-exec registers.
type input struct {
	HookEventName string         `json:"hook_event_name"`
	Cwd           string         `json:"cwd"`
	ToolName      string         `json:"tool_name"`
	ToolInput     map[string]any `json:"tool_input"`
	ToolUseID     string         `json:"tool_use_id"`
	Message       string         `json:"message"`
}

// preToolUseOutput is the documented JSON decision of a PreToolUse hook.
type preToolUseOutput struct {
	HookSpecificOutput struct {
		HookEventName            string `json:"hookEventName"`
		PermissionDecision       string `json:"permissionDecision"`
		PermissionDecisionReason string `json:"permissionDecisionReason"`
	} `json:"hookSpecificOutput"`
}

// Run is the hook program: it reads one event on stdin and answers it. It
// returns the exit status: 0 (the answer, if any, is on stdout), or 2 with
// the reason on stderr when anything goes wrong, which blocks the tool.
func Run(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) (code int) {
	defer func() {
		if r := recover(); r != nil {
			_, _ = fmt.Fprintf(stderr, "Meshwork gate: the hook failed, so the tool call is refused: %v\n", r)
			code = 2
		}
	}()
	out, err := decide(stdin, getenv)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "Meshwork gate: %v; the tool call is refused\n", err)
		return 2
	}
	if len(out) > 0 {
		if _, err := stdout.Write(out); err != nil {
			_, _ = fmt.Fprintf(stderr, "Meshwork gate: writing the decision: %v\n", err)
			return 2
		}
	}
	return 0
}

// decide returns what the hook prints for one event.
func decide(stdin io.Reader, getenv func(string) string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(stdin, maxEventBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the hook event: %w", err)
	}
	if len(data) > maxEventBytes {
		return nil, fmt.Errorf("the hook event is over %d bytes", maxEventBytes)
	}
	var in input
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, fmt.Errorf("the hook event is not JSON: %w", err)
	}
	switch in.HookEventName {
	case "PreToolUse":
	case "Notification":
		// Echoed, so the stream's hook_response carries the message.
		return []byte(in.Message), nil
	case "":
		return nil, errors.New("the hook event names no hook_event_name")
	default:
		return nil, nil
	}
	g, workspace, err := loadPolicy(getenv)
	if err != nil {
		return nil, err
	}
	vs := g.EvaluateToolCall(gate.ToolCall{Tool: in.ToolName, Input: in.ToolInput, Workspace: workspace, Cwd: in.Cwd}, OSFiles{})
	mark := markToolUse(in.ToolUseID)
	if len(vs) == 0 {
		// Plain text with exit 0: the CLI shows it in the transcript only,
		// and reports it in the stream, where mesh-exec pairs the decision
		// with its call. No permission decision: the CLI's own permissions
		// (allowed tools) still apply.
		return []byte("Meshwork gate: allowed " + mark + "\n"), nil
	}
	var o preToolUseOutput
	o.HookSpecificOutput.HookEventName = "PreToolUse"
	o.HookSpecificOutput.PermissionDecision = "deny"
	o.HookSpecificOutput.PermissionDecisionReason = Reason(vs)
	if mark != "" {
		o.HookSpecificOutput.PermissionDecisionReason += "\n" + mark
	}
	return json.Marshal(o)
}

// loadPolicy compiles the policy in the environment.
func loadPolicy(getenv func(string) string) (*gate.Gate, string, error) {
	raw := getenv(PolicyEnv)
	if raw == "" {
		return nil, "", fmt.Errorf("no policy: %s is not set", PolicyEnv)
	}
	var p Policy
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return nil, "", fmt.Errorf("the policy in %s does not decode: %w", PolicyEnv, err)
	}
	if !filepath.IsAbs(p.Workspace) {
		return nil, "", fmt.Errorf("the policy's workspace %q is not an absolute path", p.Workspace)
	}
	g, err := gate.Compile(&p.Definition)
	if err != nil {
		return nil, "", fmt.Errorf("the policy does not compile: %w", err)
	}
	return g, p.Workspace, nil
}

// CheckPolicy reports whether a policy decodes and compiles, so mesh-exec
// can refuse a bad one when it starts rather than at the agent's first
// tool call.
func CheckPolicy(raw string) error {
	_, _, err := loadPolicy(func(string) string { return raw })
	return err
}

// OSFiles answers the gate's questions about files from the file system.
type OSFiles struct{}

// RealPath resolves symbolic links in abs; for a path that does not exist
// yet, in its deepest existing parent.
func (OSFiles) RealPath(abs string) (string, error) {
	rest := ""
	for p := filepath.Clean(abs); ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return "", err
			}
			return filepath.Join(real, rest), nil
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			return "", err
		}
		if p == filepath.Dir(p) {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// ReadFile reads a regular file of at most limit bytes.
func (OSFiles) ReadFile(abs string, limit int64) ([]byte, error) {
	// O_NONBLOCK: a FIFO the agent made must not hold the hook until its
	// timeout (after which the CLI would run the call) before the mode
	// check below refuses it.
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", abs)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s holds %d bytes, over the limit of %d", abs, st.Size(), limit)
	}
	return io.ReadAll(io.LimitReader(f, limit+1))
}
