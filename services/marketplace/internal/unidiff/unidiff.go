// Package unidiff writes git-format unified diffs with go-git's own encoder:
// the marketplace's workspace diffs (package workdiff) and meshworker's
// git_diff tool describe their changed files here and get the same patch
// text, which `git apply` takes. A binary file's content, when a patch
// carries it, is in git's own binary form ("GIT binary patch"), encoded by
// go-gitdiff, which the marketplace applies patches with.
package unidiff

import (
	"bytes"
	"compress/zlib"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bluekeyes/go-gitdiff/gitdiff"

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
	// carried: a binary change whose new content (dst) the patch
	// carries.
	carried bool
	dst     []byte
	chunks  []fdiff.Chunk
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

// BinaryContent is a change to a binary file that the patch carries, in
// git's binary form: the new content, deflated and base85-encoded (the
// forward hunk alone: git apply -R finds the old content only in a
// repository that holds its blob). Its text
// is ASCII, so it survives JSON as it is. git apply takes it when both
// sides' hashes are the contents' blob hashes: it checks the file it
// patches, and what it writes, against them.
func BinaryContent(from, to *File, dst []byte) *FilePatch {
	return &FilePatch{from: from, to: to, binary: true, carried: true, dst: dst}
}

// Encode writes the patches as one git-format unified diff, with git's
// three lines of context.
func Encode(w io.Writer, patches []*FilePatch) error {
	var run patch
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		err := fdiff.NewUnifiedEncoder(w, fdiff.DefaultContextLines).Encode(run)
		run = run[:0]
		return err
	}
	for _, p := range patches {
		if !p.carried && (p.binary || len(p.chunks) > 0) {
			run = append(run, p)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		if err := encodeHeaderNamed(w, p); err != nil {
			return err
		}
	}
	return flush()
}

// encodeHeaderNamed writes a change that has no "---" and "+++" lines (a
// carried binary change; a rename, a mode change, an empty file added or
// deleted) with go-gitdiff's formatter, which quotes names as git does:
// git reads such a change's names from its "diff --git" line, where
// go-git's encoder leaves a name with a double quote unquoted and git
// cannot read it.
func encodeHeaderNamed(w io.Writer, p *FilePatch) error {
	f := &gitdiff.File{IsBinary: p.carried, OldOIDPrefix: plumbing.ZeroHash.String(), NewOIDPrefix: plumbing.ZeroHash.String()}
	switch {
	case p.from == nil:
		f.IsNew, f.NewName, f.NewMode = true, p.to.path, os.FileMode(p.to.mode)
		f.NewOIDPrefix = p.to.hash.String()
	case p.to == nil:
		f.IsDelete, f.OldName, f.OldMode = true, p.from.path, os.FileMode(p.from.mode)
		f.OldOIDPrefix = p.from.hash.String()
	default:
		f.OldName, f.NewName, f.OldMode = p.from.path, p.to.path, os.FileMode(p.from.mode)
		f.IsRename = p.from.path != p.to.path
		if p.to.mode != p.from.mode {
			f.NewMode = os.FileMode(p.to.mode)
		}
		f.OldOIDPrefix, f.NewOIDPrefix = p.from.hash.String(), p.to.hash.String()
		if !p.carried {
			// The same content: git writes no index line.
			f.OldOIDPrefix, f.NewOIDPrefix = "", ""
		}
	}
	if !p.carried {
		_, err := io.WriteString(w, f.String())
		return err
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	if _, err := zw.Write(p.dst); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	f.BinaryFragment = &gitdiff.BinaryFragment{Method: gitdiff.BinaryPatchLiteral, Size: int64(len(p.dst)), RawData: z.Bytes()}
	_, err := io.WriteString(w, f.String())
	return err
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
