// Package source brings a user's code into a journey: it turns a
// spawn_worker source (a git repository the marketplace fetches, an archive
// the client sends, or another journey's base plus a patch) into a base
// draft (package bases), checking everything on the way in.
//
// Everything here is hostile input: URLs and paths are held to the
// operator's allowlists, archives and repositories to size and file limits
// (checked while streaming), and every entry to the path and link rules of
// bases.CheckPath and bases.CheckLink. Workers never fetch anything; the
// marketplace does, with credentials only it sees.
package source

import (
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshapi"
)

// MaxDepth is the deepest history a git source may ask for.
const MaxDepth = 1000

// Spec is spawn_worker's source: exactly one of Git, Archive or Journey.
type Spec struct {
	Git     *GitSpec     `json:"git,omitempty" jsonschema:"a git repository the marketplace fetches: an https URL on an allowed host, or a path or file:// URL under an allowed root"`
	Archive *ArchiveSpec `json:"archive,omitempty" jsonschema:"a tar.gz of the code, sent inline"`
	Journey string       `json:"journey,omitempty" jsonschema:"another of your journeys: start from its base plus patch"`
	Patch   string       `json:"patch,omitempty" jsonschema:"with journey: a unified diff (git format) applied to that journey's base"`
}

// GitSpec is a git source.
type GitSpec struct {
	URL   string `json:"url" jsonschema:"https://host/path on an allowed host, or a local path (or file:// URL) under an allowed root"`
	Ref   string `json:"ref,omitempty" jsonschema:"branch, tag or commit (default: the repository's HEAD)"`
	Depth int    `json:"depth,omitempty" jsonschema:"history to fetch for remote repositories (default 1)"`
}

// ArchiveSpec is an archive source.
type ArchiveSpec struct {
	TarGzBase64 string `json:"tar_gz_base64" jsonschema:"the archive: a gzip-compressed tar, base64-encoded"`
	SHA256      string `json:"sha256" jsonschema:"hex SHA-256 of the compressed archive (before base64), checked while it is read"`
}

// Kind names which source a Spec is.
func (s *Spec) Kind() string {
	switch {
	case s.Git != nil:
		return "git"
	case s.Archive != nil:
		return "archive"
	case s.Journey != "":
		return "journey"
	}
	return ""
}

// Validate checks that exactly one source is given, with what it needs.
func (s *Spec) Validate() error {
	n := 0
	for _, set := range []bool{s.Git != nil, s.Archive != nil, s.Journey != ""} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return invalid("source needs one of git, archive or journey")
	case n > 1:
		return invalid("source takes one of git, archive or journey, not several")
	case s.Patch != "" && s.Journey == "":
		return invalid("source.patch goes with source.journey")
	case s.Git != nil && strings.TrimSpace(s.Git.URL) == "":
		return invalid("source.git.url is required")
	case s.Git != nil && (s.Git.Depth < 0 || s.Git.Depth > MaxDepth):
		return invalid("source.git.depth %d is not between 0 and %d", s.Git.Depth, MaxDepth)
	case s.Archive != nil && s.Archive.TarGzBase64 == "":
		return invalid("source.archive.tar_gz_base64 is required")
	case s.Archive != nil && s.Archive.SHA256 == "":
		return invalid("source.archive.sha256 is required: the hex SHA-256 of the compressed archive")
	}
	return nil
}

// Record is what the marketplace keeps of a source beside the journey (and
// reports back): never credentials, never the archive or patch themselves.
type Record struct {
	Kind string `json:"kind"`
	// URL is the git URL as given (it holds no credentials: those are refused).
	URL    string `json:"url,omitempty"`
	Ref    string `json:"ref,omitempty"`
	Commit string `json:"commit,omitempty" jsonschema:"the commit the base is (git) or descends from"`
	// SHA256 is the archive's checksum.
	SHA256 string `json:"sha256,omitempty"`
	// Journey and PatchSHA256 describe a journey-plus-patch source.
	Journey     string `json:"journey,omitempty"`
	PatchSHA256 string `json:"patch_sha256,omitempty"`
	Files       int    `json:"files"`
	Bytes       int64  `json:"bytes"`
}

// Error is a source refused for what it is or says: the message names the
// problem, the code is CodeInvalid (bad input), CodeDenied (outside the
// operator's allowlists), CodeNotFound (no such ref or repository) or
// CodeUnavailable (the host did not answer). Anything else is the
// marketplace's own failure.
type Error = meshapi.Error

// The error codes.
const (
	CodeInvalid     = meshapi.CodeInvalidArgument
	CodeDenied      = meshapi.CodePermissionDenied
	CodeNotFound    = meshapi.CodeNotFound
	CodeUnavailable = meshapi.CodeUnavailable
)

func invalid(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Message: fmt.Sprintf(format, args...)}
}

func denied(format string, args ...any) error {
	return &Error{Code: CodeDenied, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) error {
	return &Error{Code: CodeNotFound, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err's *Error, if it is one.
func AsError(err error) (*Error, bool) { return meshapi.AsError(err) }
