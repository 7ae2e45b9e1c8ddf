package agenthook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/services/mesh-exec/internal/hookwire"
)

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
func Run(stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	event, err := hookwire.ReadEvent(stdin)
	var a Answer
	if err != nil {
		a = hookwire.Refuse(err)
	} else {
		a = answer(event, func() (*Decider, error) { return NewDecider(getenv(PolicyEnv)) })
	}
	return a.Write(stdout, stderr)
}

// Answer is what the hook says for one event (hookwire's wire type).
type Answer = hookwire.Answer

// Decider decides hook events with one compiled policy.
type Decider struct {
	gate      *gate.Gate
	workspace string
	denied    []string
}

// NewDecider compiles a policy (PolicyEnv's JSON).
func NewDecider(policy string) (*Decider, error) {
	g, p, err := loadPolicy(func(string) string { return policy })
	if err != nil {
		return nil, err
	}
	return &Decider{gate: g, workspace: p.Workspace, denied: p.Definition.Constraints.DeniedPaths}, nil
}

// Settings are the CLI's settings for this policy (see Settings): hooks
// that run command, and read rules for the policy's denied_paths, since the
// hook sees where Grep and Glob search, not what they find.
func (d *Decider) Settings(command string) string { return Settings(command, d.workspace, d.denied) }

// Answer decides one event; it never fails open: an error is exit 2.
func (d *Decider) Answer(event []byte) Answer {
	return answer(event, func() (*Decider, error) { return d, nil })
}

// answer decides one event. The policy is compiled only for the events that
// need it (PreToolUse), so acknowledging the others stays cheap.
func answer(event []byte, decider func() (*Decider, error)) (a Answer) {
	defer func() {
		if r := recover(); r != nil {
			a = Answer{Code: 2, Stderr: fmt.Sprintf("Meshwork gate: the hook failed, so the tool call is refused: %v\n", r)}
		}
	}()
	var in input
	if err := json.Unmarshal(event, &in); err != nil {
		return hookwire.Refuse(fmt.Errorf("the hook event is not JSON: %w", err))
	}
	switch in.HookEventName {
	case "PreToolUse":
	case "Notification":
		// Echoed, so the stream's hook_response carries the message.
		return Answer{Stdout: in.Message}
	case "":
		return hookwire.Refuse(errors.New("the hook event names no hook_event_name"))
	default:
		return Answer{}
	}
	d, err := decider()
	if err != nil {
		return hookwire.Refuse(err)
	}
	vs := d.gate.EvaluateToolCall(gate.ToolCall{Tool: in.ToolName, Input: in.ToolInput, Workspace: d.workspace, Cwd: in.Cwd}, OSFiles{})
	mark := markToolUse(in.ToolUseID)
	if len(vs) == 0 {
		// Plain text with exit 0: the CLI shows it in the transcript only,
		// and reports it in the stream, where mesh-exec pairs the decision
		// with its call. No permission decision: the CLI's own permissions
		// (allowed tools) still apply.
		return Answer{Stdout: allowedText + " " + mark + "\n"}
	}
	var o preToolUseOutput
	o.HookSpecificOutput.HookEventName = "PreToolUse"
	o.HookSpecificOutput.PermissionDecision = "deny"
	o.HookSpecificOutput.PermissionDecisionReason = Reason(vs)
	if mark != "" {
		o.HookSpecificOutput.PermissionDecisionReason += "\n" + mark
	}
	out, err := json.Marshal(o)
	if err != nil {
		return hookwire.Refuse(err)
	}
	return Answer{Stdout: string(out)}
}

// loadPolicy compiles the policy in the environment.
func loadPolicy(getenv func(string) string) (*gate.Gate, Policy, error) {
	raw := getenv(PolicyEnv)
	if raw == "" {
		return nil, Policy{}, fmt.Errorf("no policy: %s is not set", PolicyEnv)
	}
	var p Policy
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		return nil, Policy{}, fmt.Errorf("the policy in %s does not decode: %w", PolicyEnv, err)
	}
	if !filepath.IsAbs(p.Workspace) {
		return nil, Policy{}, fmt.Errorf("the policy's workspace %q is not an absolute path", p.Workspace)
	}
	g, err := gate.Compile(&p.Definition)
	if err != nil {
		return nil, Policy{}, fmt.Errorf("the policy does not compile: %w", err)
	}
	return g, p, nil
}

// OSFiles answers the gate's questions about files from the file system.
type OSFiles struct{}

// RealPath resolves symbolic links in abs as the kernel does: abs is taken
// as written, not cleaned first, since a ".." after a link is the link's
// target's parent (l/../x is not x). For a path that does not exist yet, the
// deepest existing prefix is resolved and the rest joined to it.
func (OSFiles) RealPath(abs string) (string, error) {
	parts := strings.Split(abs, "/")
	for n := len(parts); n > 0; n-- {
		prefix := strings.Join(parts[:n], "/")
		if prefix == "" {
			prefix = "/"
		}
		if _, err := os.Lstat(prefix); err != nil {
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) && !errors.Is(err, syscall.ENOTDIR) {
				return "", err
			}
			continue
		}
		// EvalSymlinks walks the prefix a component at a time, applying
		// a ".." to what the components before it resolved to.
		real, err := filepath.EvalSymlinks(prefix)
		if err != nil {
			return "", err
		}
		return filepath.Join(append([]string{real}, parts[n:]...)...), nil
	}
	return filepath.Clean(abs), nil
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
