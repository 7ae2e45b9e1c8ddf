package backendtest

import (
	"testing"
)

// Scenario is what the scripted CLI is to do in one run, in terms every
// agent CLI shares. A backend's tests translate it into their fake's script
// format (Scripted.Script).
//
// The fields combine: the fake emits UnknownEvent first (right after its
// first event), then does Edit, then fails with Fail or answers Reply.
type Scenario struct {
	// Reply is the agent's final answer on success. The suite checks that
	// Result.Output contains it.
	Reply string
	// Edit, when set, has the agent write a file with its file-editing tool
	// (creating it and its directories, or replacing it) before answering.
	Edit *FileEdit
	// Fail, when set, makes the run fail: the CLI reports an error with
	// this message the way it reports its own failures (an error result,
	// its usual failing exit status). Reply is then not used.
	Fail string
	// UnknownEvent has the CLI print an event of a type no parser knows
	// (as a newer release of the CLI might), which must be ignored.
	UnknownEvent bool
}

// FileEdit is a file the agent writes.
type FileEdit struct {
	// Path is relative to the repository, with "/" separators.
	Path string
	// Content is the file's whole new content.
	Content string
}

// Reply is a run that answers text.
func Reply(text string) Scenario { return Scenario{Reply: text} }

// EditFile is a run that writes content to path (relative to the
// repository) with the agent's file tool, then answers "wrote <path>".
func EditFile(path, content string) Scenario {
	return Scenario{Edit: &FileEdit{Path: path, Content: content}, Reply: "wrote " + path}
}

// Fail is a run that fails with message.
func Fail(message string) Scenario { return Scenario{Fail: message} }

// UnknownEvent is a run that prints an event of an unknown type, then
// answers reply.
func UnknownEvent(reply string) Scenario { return Scenario{UnknownEvent: true, Reply: reply} }

// Scripted is how the suite runs a backend's scripted CLI: a fake binary
// that follows a script instead of calling a model.
type Scripted struct {
	// Binary, when set, replaces argv[0] of every command the backend
	// builds. Leave it empty when the backend under test is configured to
	// run the fake already.
	Binary string
	// Script writes a script for s in the fake's own format (into
	// t.TempDir(), say) and returns its path. Required.
	Script func(t *testing.T, s Scenario) string
	// Env returns the environment entries that make the fake follow the
	// script at path (and anything else it needs, such as a dummy API key).
	// They are added to the suite's base environment; see [BaseEnv].
	// Required.
	Env func(script string) []string
	// Sessionless says the CLI has no sessions: the suite then expects no
	// session id and Command to refuse a resume, instead of checking that
	// a session resumes.
	Sessionless bool
	// UnknownSession, when set, is a well-formed session id the CLI does not
	// have; the suite checks that resuming it fails with
	// backend.ErrSessionNotFound.
	UnknownSession string
}
