// Package workdiff computes what a worker changed: it reads the workspace
// as the runtime exports it (a tar stream the engine produces, not anything
// the worker says) and compares it with the journey's recorded base
// (package bases). The worker's own .git is never consulted, so rewriting
// its history or index hides nothing.
//
// The change comes out as a git-format unified diff that `git apply` takes
// (binary files are listed in the summary, not inlined), as a tar of the
// workspace, or as a git bundle of one commit on the base's git commit.
// Paths under .meshwork/ (the marketplace's private part of the workspace)
// and every .git directory are left out.
package workdiff

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/gitpath"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/unidiff"
)

// Options tune Compute. Zero fields take the defaults.
type Options struct {
	// MaxChangedBytes bounds the content of changed files held to build the
	// patch. Defaults to 64 MiB.
	MaxChangedBytes int64
	// MaxTextBytes is the largest file diffed line by line, or carried in
	// binary form; a larger one is listed (binary and omitted), not put in
	// the patch. Defaults to 4 MiB.
	MaxTextBytes int64
	// MaxBinaryBytes bounds the binary content one patch carries, in
	// bytes before it is deflated: binary files past it are listed
	// (omitted), so that a patch stays within what a source takes
	// (source.MaxPatchBytes) and what a client reads. Defaults to 8 MiB.
	MaxBinaryBytes int64
	// MaxEntries bounds the workspace export's entries (files, links and
	// directories), each of which the diff holds. Defaults to 1,000,000.
	MaxEntries int
	// MaxPatchBytes bounds the patch: what MaxChangedBytes does not
	// count, the base's side of deleted and modified files, is in it too.
	// Defaults to 128 MiB.
	MaxPatchBytes int64
	// MaxNameBytes bounds the export's paths together, each of which the
	// diff holds too (one is at most gate.MaxPathLen bytes). Defaults to
	// 64 MiB.
	MaxNameBytes int
}

// ErrTooLarge is returned when the changed files pass MaxChangedBytes.
var ErrTooLarge = errors.New("the change is too large")

// ErrUnexportable marks a workspace that holds what a change cannot carry
// safely (a hard link to a file diffs leave out, a link through a link):
// the worker has to change it first.
var ErrUnexportable = errors.New("the workspace holds what a change cannot carry")

func (o Options) withDefaults() Options {
	if o.MaxChangedBytes <= 0 {
		o.MaxChangedBytes = 64 << 20
	}
	if o.MaxTextBytes <= 0 {
		o.MaxTextBytes = 4 << 20
	}
	if o.MaxBinaryBytes <= 0 {
		o.MaxBinaryBytes = 8 << 20
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1_000_000
	}
	if o.MaxPatchBytes <= 0 {
		o.MaxPatchBytes = 128 << 20
	}
	if o.MaxNameBytes <= 0 {
		o.MaxNameBytes = 64 << 20
	}
	return o
}

// Change is a workspace compared with its base.
type Change struct {
	// Summary is the whole change's.
	Summary meshtype.ChangeSummary
	// Patch is the git-format unified diff of the text files in Summary.
	Patch []byte

	// changed is each changed file with its part of the patch, by path.
	changed []changedFile
	base    *bases.Base
	files   map[string]bases.Entry // the workspace's files
	// blobs holds the content of the workspace files that the base lacks.
	blobs *memory.Storage
	// binaryBytes is the binary content the patch carries so far.
	binaryBytes int64
}

// changedFile is one file of a change and its part of the patch (none for
// a binary file).
type changedFile struct {
	meshtype.ChangedFile
	patch []byte
}

// Private reports whether a workspace path is left out of changes:
// .meshwork/ at the root, and any .git directory, in any letter case or
// any name another file system takes for one (gitpath: ".git.", "GIT~1"),
// which git would refuse, and the whole patch with it.
func Private(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return strings.EqualFold(first, ".meshwork") || gitpath.HasDotGit(p)
}

// Compute reads the workspace tar and compares it with base.
func Compute(base *bases.Base, workspace io.Reader, opts Options) (*Change, error) {
	opts = opts.withDefaults()
	baseFiles, err := base.Files()
	if err != nil {
		return nil, err
	}
	c := &Change{base: base, files: map[string]bases.Entry{}, blobs: memory.NewStorage()}
	// Hard links come as the second path of a file whose content came
	// first: every path's hash is kept to resolve them, private ones too.
	private := map[string]bool{}
	links := map[string]string{} // the workspace's symbolic links, to their targets
	budget := opts.MaxChangedBytes
	names := 0         // the paths' bytes so far
	var scratch []byte // hashFile's
	tr := tar.NewReader(workspace)
	for entries := 1; ; entries++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the workspace: %w", err)
		}
		if entries > opts.MaxEntries {
			return nil, fmt.Errorf("%w: the workspace holds more than %d files and directories", ErrTooLarge, opts.MaxEntries)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "./"), "/")
		if name == "" || name == "." {
			continue
		}
		if path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") || strings.HasPrefix(name, "/") {
			return nil, fmt.Errorf("the workspace export holds the name %q, which is not a path inside the workspace", hdr.Name)
		}
		if len(name) > gate.MaxPathLen {
			return nil, fmt.Errorf("%w: the path %q… is %d bytes; the limit is %d", ErrTooLarge, name[:64], len(name), gate.MaxPathLen)
		}
		if names += len(name); names > opts.MaxNameBytes {
			return nil, fmt.Errorf("%w: the workspace's paths pass %d bytes together", ErrTooLarge, opts.MaxNameBytes)
		}
		if Private(name) {
			if hdr.Typeflag == tar.TypeReg || hdr.Typeflag == tar.TypeRegA { //nolint:staticcheck // what older engines write
				private[name] = true
			}
			continue
		}
		var (
			mode filemode.FileMode
			data []byte
		)
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // what older engines write
			mode = filemode.Regular
			if hdr.Mode&0o100 != 0 {
				mode = filemode.Executable
			}
			tooLarge := func() error {
				return fmt.Errorf("%w: %q (%d bytes) and the other changed files pass %d bytes; export a tar, or stop the worker with workspace archive", ErrTooLarge, name, hdr.Size, opts.MaxChangedBytes)
			}
			if hdr.Size > budget && !c.baseHasSize(baseFiles[name], hdr.Size) {
				// Changed, and past the budget: known without reading
				// it, which a sparse file of terabytes would take long.
				return nil, tooLarge()
			}
			h, content, err := hashFile(tr, hdr.Size, budget, baseFiles[name].Hash, &scratch)
			if err != nil {
				return nil, fmt.Errorf("reading %q from the workspace: %w", name, err)
			}
			if content == nil && h != baseFiles[name].Hash {
				return nil, tooLarge()
			}
			if content != nil {
				budget -= int64(len(content))
				if _, err := bases.WriteBlob(c.blobs, content); err != nil {
					return nil, err
				}
			}
			c.files[name] = bases.Entry{Mode: mode, Hash: h, Size: hdr.Size}
			continue
		case tar.TypeSymlink:
			mode, data = filemode.Symlink, []byte(hdr.Linkname)
			links[name] = hdr.Linkname
			// A link's target is held like a changed file's content.
			if budget -= int64(len(data)); budget < 0 {
				return nil, fmt.Errorf("%w: the links' targets and the changed files pass %d bytes", ErrTooLarge, opts.MaxChangedBytes)
			}
		case tar.TypeLink:
			target := strings.TrimSuffix(strings.TrimPrefix(hdr.Linkname, "./"), "/")
			e, ok := c.files[target]
			if !ok || e.Mode == filemode.Symlink {
				if private[target] {
					return nil, fmt.Errorf("%w: %q is a hard link to %q, which diffs leave out: make it a copy", ErrUnexportable, name, target)
				}
				return nil, fmt.Errorf("%w: %q is a hard link to %q, which the workspace export did not hold before it", ErrUnexportable, name, target)
			}
			c.files[name] = e
			continue
		default:
			continue // directories, devices, pipes: not content
		}
		h, err := bases.WriteBlob(c.blobs, data)
		if err != nil {
			return nil, err
		}
		c.files[name] = bases.Entry{Mode: mode, Hash: h, Size: int64(len(data))}
	}
	// The result gate checks each changed link alone; a chain through
	// another link could leave the workspace where none does by itself.
	// A base has none (a draft refuses them), so a chain is the change's.
	if p, through, ok := bases.LinkThroughLink(links); ok {
		return nil, fmt.Errorf("%w: symbolic link %q points through the symbolic link %q, which a checkout may resolve outside the workspace: make one of them a file", ErrUnexportable, p, through)
	}
	if err := c.compare(baseFiles, opts); err != nil {
		return nil, err
	}
	return c, nil
}

// baseHasSize reports whether the base holds e (a regular file) with size
// bytes: only then can a file of that size be the base's unchanged.
func (c *Change) baseHasSize(e bases.Entry, size int64) bool {
	if e.Hash.IsZero() || e.Mode == filemode.Symlink {
		return false
	}
	n, err := c.size(&file{entry: e})
	return err == nil && n == size
}

// hashFile reads one file's content and returns its git blob hash. The
// content is returned too when it differs from want and fits in budget; nil
// when it equals want (nothing to keep) or does not fit. The content is
// read into scratch, reused from file to file and grown as needed: nearly
// every file of a workspace is unchanged, and only a changed one's content
// is copied out to be kept.
func hashFile(r io.Reader, size, budget int64, want plumbing.Hash, scratch *[]byte) (plumbing.Hash, []byte, error) {
	hasher := plumbing.NewHasher(plumbing.BlobObject, size)
	if size > budget {
		if len(*scratch) < copyChunk {
			*scratch = make([]byte, copyChunk)
		}
		if _, err := io.CopyBuffer(hasher, r, (*scratch)[:copyChunk]); err != nil {
			return plumbing.ZeroHash, nil, err
		}
		return hasher.Sum(), nil, nil
	}
	if int64(cap(*scratch)) < size {
		*scratch = make([]byte, size)
	}
	buf := (*scratch)[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		return plumbing.ZeroHash, nil, err
	}
	_, _ = hasher.Write(buf)
	h := hasher.Sum()
	if h == want {
		return h, nil, nil
	}
	content := make([]byte, size) // never nil: an empty changed file is kept too
	copy(content, buf)
	return h, content, nil
}

// copyChunk is what hashFile reads at a time of a file it does not keep.
const copyChunk = 32 << 10

// under reports whether p is one of paths or below one of them.
func under(p string, paths []string) bool {
	for _, want := range paths {
		want = strings.Trim(path.Clean("/"+want), "/")
		if want == "" || p == want || strings.HasPrefix(p, want+"/") {
			return true
		}
	}
	return false
}

// fileChange is one path's change before it is encoded.
type fileChange struct {
	meshtype.ChangedFile
	from, to *file
}

// compare finds the changes, pairs exact renames, and writes the patch.
func (c *Change) compare(baseFiles map[string]bases.Entry, opts Options) error {
	var added, deleted []string
	var changes []*fileChange
	for p, e := range c.files {
		b, ok := baseFiles[p]
		switch {
		case !ok:
			added = append(added, p)
		case (b.Mode == filemode.Symlink) != (e.Mode == filemode.Symlink):
			// A file became a link or back: git writes that as a deletion
			// and an addition, and git apply takes nothing else.
			deleted, added = append(deleted, p), append(added, p)
		case b.Hash != e.Hash || b.Mode != e.Mode:
			changes = append(changes, &fileChange{
				ChangedFile: meshtype.ChangedFile{Path: p, Status: meshtype.ChangeModified, Mode: e.Mode.String()},
				from:        &file{path: p, entry: b}, to: &file{path: p, entry: e},
			})
		}
	}
	for p := range baseFiles {
		if _, ok := c.files[p]; !ok {
			deleted = append(deleted, p)
		}
	}
	sort.Strings(added)
	sort.Strings(deleted)
	// Exact renames: a deleted path whose content reappears at an added one.
	byHash := map[plumbing.Hash][]string{}
	for _, p := range deleted {
		byHash[baseFiles[p].Hash] = append(byHash[baseFiles[p].Hash], p)
	}
	renamedFrom := map[string]bool{}
	for _, p := range added {
		e := c.files[p]
		if olds := byHash[e.Hash]; len(olds) > 0 && e.Mode != filemode.Symlink && olds[0] != p {
			old := olds[0]
			byHash[e.Hash] = olds[1:]
			renamedFrom[old] = true
			changes = append(changes, &fileChange{
				ChangedFile: meshtype.ChangedFile{Path: p, OldPath: old, Status: meshtype.ChangeRenamed, Mode: e.Mode.String()},
				from:        &file{path: old, entry: baseFiles[old]}, to: &file{path: p, entry: e},
			})
			continue
		}
		changes = append(changes, &fileChange{
			ChangedFile: meshtype.ChangedFile{Path: p, Status: meshtype.ChangeAdded, Mode: e.Mode.String()},
			to:          &file{path: p, entry: e},
		})
	}
	for _, p := range deleted {
		if renamedFrom[p] {
			continue
		}
		changes = append(changes, &fileChange{
			ChangedFile: meshtype.ChangedFile{Path: p, Status: meshtype.ChangeDeleted, Mode: baseFiles[p].Mode.String()},
			from:        &file{path: p, entry: baseFiles[p]},
		})
	}
	// By path; a deletion before the addition at the same path (a type
	// change), as git writes them.
	sort.SliceStable(changes, func(i, j int) bool {
		if changes[i].Path != changes[j].Path {
			return changes[i].Path < changes[j].Path
		}
		return changes[i].Status == meshtype.ChangeDeleted
	})
	var patchBytes int64
	for _, ch := range changes {
		if ch.to != nil && ch.to.entry.Mode == filemode.Symlink {
			target, err := c.content(ch.to)
			if err != nil {
				return err
			}
			ch.LinkTarget = string(target)
		}
		fp, err := c.filePatch(ch, opts)
		if err != nil {
			return err
		}
		cf := changedFile{ChangedFile: ch.ChangedFile}
		if fp != nil {
			var buf bytes.Buffer
			if err := unidiff.Encode(&buf, []*unidiff.FilePatch{fp}); err != nil {
				return fmt.Errorf("writing the patch: %w", err)
			}
			cf.patch = buf.Bytes()
			if patchBytes += int64(len(cf.patch)); patchBytes > opts.MaxPatchBytes {
				return fmt.Errorf("%w: the patch passes %d bytes at %q; export a tar, or stop the worker with workspace archive", ErrTooLarge, opts.MaxPatchBytes, ch.Path)
			}
		}
		c.changed = append(c.changed, cf)
	}
	c.Summary, c.Patch = summarize(c.changed)
	c.Summary.Digest = c.digest()
	return nil
}

// digest is the SHA-256 of the workspace's files, in path order: each one's
// mode, path and blob hash. The base is fixed for a journey, so two equal
// digests are one change, whatever its patch shows.
func (c *Change) digest() string {
	paths := slices.Sorted(maps.Keys(c.files))
	h := sha256.New()
	for _, p := range paths {
		e := c.files[p]
		// NUL ends a path: no path holds one.
		_, _ = fmt.Fprintf(h, "%o %s\x00%s\n", uint32(e.Mode), p, e.Hash)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Only is the change to the given files and directories alone: its summary
// (with the whole workspace's digest) and patch. No paths is the whole
// change.
func (c *Change) Only(paths []string) (meshtype.ChangeSummary, []byte) {
	if len(paths) == 0 {
		return c.Summary, c.Patch
	}
	var some []changedFile
	for _, cf := range c.changed {
		if under(cf.Path, paths) || (cf.OldPath != "" && under(cf.OldPath, paths)) {
			some = append(some, cf)
		}
	}
	s, patch := summarize(some)
	s.Digest = c.Summary.Digest // the workspace's, whatever part is shown
	return s, patch
}

// summarize counts a change's files and joins their patches (git's format
// is each file's part, one after another).
func summarize(changed []changedFile) (meshtype.ChangeSummary, []byte) {
	files := make([]meshtype.ChangedFile, 0, len(changed))
	var patch []byte
	for _, ch := range changed {
		patch = append(patch, ch.patch...)
		files = append(files, ch.ChangedFile)
	}
	return meshtype.Summarize(files, int64(len(patch))), patch
}

// content reads a file of either side.
func (c *Change) content(f *file) ([]byte, error) {
	if f == nil {
		return nil, nil
	}
	if obj, err := c.blobs.EncodedObject(plumbing.BlobObject, f.entry.Hash); err == nil {
		r, err := obj.Reader()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		return io.ReadAll(r)
	}
	return c.base.Blob(f.entry.Hash, math.MaxInt64)
}

// size is a file's content length, looked up in the base when the entry
// does not say.
func (c *Change) size(f *file) (int64, error) {
	if f == nil {
		return 0, nil
	}
	if f.entry.Size >= 0 {
		return f.entry.Size, nil
	}
	return c.base.Storer().EncodedObjectSize(f.entry.Hash)
}

// filePatch diffs one change, filling its line counts and binary and
// omitted flags: a binary change is carried in git's binary form, and one
// too large for a patch (past MaxTextBytes, or past MaxBinaryBytes with the
// binary files before it) is omitted (nil): listed, not put in the patch.
func (c *Change) filePatch(ch *fileChange, opts Options) (*unidiff.FilePatch, error) {
	if ch.from != nil && ch.to != nil && ch.from.entry.Hash == ch.to.entry.Hash && !ch.from.entry.Hash.IsZero() {
		// A rename or a mode change that keeps the content is headers
		// only, whatever the content: git apply takes it as it is.
		return unidiff.Text(ch.from.side(), ch.to.side(), nil, nil), nil
	}
	for _, f := range []*file{ch.from, ch.to} {
		n, err := c.size(f)
		if err != nil {
			return nil, err
		}
		if n > opts.MaxTextBytes {
			// Too large to diff line by line, or to carry: listed, not
			// read.
			ch.Binary, ch.Omitted = true, true
			return nil, nil
		}
	}
	from, err := c.content(ch.from)
	if err != nil {
		return nil, err
	}
	to, err := c.content(ch.to)
	if err != nil {
		return nil, err
	}
	if unidiff.IsBinary(from) || unidiff.IsBinary(to) {
		ch.Binary = true
		if c.binaryBytes+int64(len(to)) > opts.MaxBinaryBytes {
			ch.Omitted = true // past the patch's share of binary content
			return nil, nil
		}
		c.binaryBytes += int64(len(to))
		return unidiff.BinaryContent(ch.from.side(), ch.to.side(), to), nil
	}
	fp := unidiff.Text(ch.from.side(), ch.to.side(), from, to)
	ch.LinesAdded, ch.LinesDeleted = fp.Added, fp.Deleted
	return fp, nil
}

// file is one side of a change: a path and its entry.
type file struct {
	path  string
	entry bases.Entry
}

// side is the file as the diff encoder sees it; nil for none.
func (f *file) side() *unidiff.File {
	if f == nil {
		return nil
	}
	return unidiff.NewFile(f.path, f.entry.Mode, f.entry.Hash)
}
