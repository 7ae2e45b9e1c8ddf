// Package unidiff writes git-format unified diffs with go-git's own encoder:
// the marketplace's workspace diffs (package workdiff) and meshworker's
// git_diff tool describe their changed files here and get the same patch
// text, which `git apply` takes.
package unidiff

import (
	"bytes"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	fdiff "github.com/go-git/go-git/v5/plumbing/format/diff"
	"github.com/go-git/go-git/v5/utils/diff"
	"github.com/sergi/go-diff/diffmatchpatch"
)

// binarySniff is how much of a file git looks at to call it binary.
const binarySniff = 8000

// IsBinary reports whether a patch lists a file's content rather than
// inlining it: git's rule (a NUL byte in the first 8,000 bytes), and any
// content that is not UTF-8. A patch travels to MCP clients as JSON text,
// whose encoders replace such bytes: inlined, the patch would no longer
// apply, or would write other bytes than the worker's.
func IsBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 || !utf8.Valid(data)
}

// File is one side of a change: a path, a git mode and the content's blob
// hash (zero when not known).
type File struct {
	path string
	mode filemode.FileMode
	hash plumbing.Hash
}

// NewFile describes one side of a change.
func NewFile(path string, mode filemode.FileMode, hash plumbing.Hash) *File {
	return &File{path: path, mode: mode, hash: hash}
}

// Path implements fdiff.File.
func (f *File) Path() string { return f.path }

// Mode implements fdiff.File.
func (f *File) Mode() filemode.FileMode { return f.mode }

// Hash implements fdiff.File.
func (f *File) Hash() plumbing.Hash { return f.hash }

// FilePatch is one file's change: From nil for an addition, To nil for a
// deletion, both set (possibly with different paths: a rename) otherwise.
type FilePatch struct {
	from, to *File
	binary   bool
	chunks   []fdiff.Chunk
	// Added and Deleted count the lines the change adds and removes.
	Added, Deleted int64
}

type chunk struct {
	text string
	op   fdiff.Operation
}

func (c chunk) Content() string       { return c.text }
func (c chunk) Type() fdiff.Operation { return c.op }

// textTimeout bounds the search for a file's smallest diff. Both sides can
// be untrusted (a source's file, a worker's rewrite of it), and go-git's
// own bound is an hour: two files of a few megabytes of distinct lines keep
// the search busy that long. Past it the search settles for a larger diff
// of the part it had not finished, which is as correct for git apply.
const textTimeout = 2 * time.Second

// Text diffs two sides' contents line by line.
func Text(from, to *File, src, dst []byte) *FilePatch {
	p := &FilePatch{from: from, to: to}
	if bytes.Equal(src, dst) {
		return p // a rename or a mode change alone
	}
	for _, d := range diff.DoWithTimeout(string(src), string(dst), textTimeout) {
		op := fdiff.Equal
		switch d.Type {
		case diffmatchpatch.DiffInsert:
			op = fdiff.Add
			p.Added += lines(d.Text)
		case diffmatchpatch.DiffDelete:
			op = fdiff.Delete
			p.Deleted += lines(d.Text)
		}
		p.chunks = append(p.chunks, chunk{text: d.Text, op: op})
	}
	return p
}

// Binary is a change to a binary file: the patch says the files differ.
func Binary(from, to *File) *FilePatch {
	return &FilePatch{from: from, to: to, binary: true}
}

// Encode writes the patches as one git-format unified diff, with git's
// three lines of context.
func Encode(w io.Writer, patches []*FilePatch) error {
	fps := make([]fdiff.FilePatch, len(patches))
	for i, p := range patches {
		fps[i] = p
	}
	return fdiff.NewUnifiedEncoder(w, fdiff.DefaultContextLines).Encode(patch(fps))
}

// lines counts a chunk's lines; a last line without a newline counts.
func lines(s string) int64 {
	n := int64(strings.Count(s, "\n"))
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// The go-git encoder's interfaces.

type patch []fdiff.FilePatch

func (p patch) FilePatches() []fdiff.FilePatch { return p }
func (patch) Message() string                  { return "" }

// IsBinary implements fdiff.FilePatch.
func (p *FilePatch) IsBinary() bool { return p.binary }

// Files implements fdiff.FilePatch. A missing side is a nil interface, as
// the encoder needs, not an interface holding a nil *File.
func (p *FilePatch) Files() (from, to fdiff.File) {
	if p.from != nil {
		from = p.from
	}
	if p.to != nil {
		to = p.to
	}
	return from, to
}

// Chunks implements fdiff.FilePatch.
func (p *FilePatch) Chunks() []fdiff.Chunk { return p.chunks }
