// Package bases keeps the marketplace's own record of what each journey's
// workspace started from: its base, a git commit in a bare repository the
// marketplace owns (<dir>/<journey uid>.git), never in the worker's reach.
//
// A worker can rewrite its own .git, its index and its history; it cannot
// touch this record, so a diff against it shows every change the worker made.
//
// A base is built in memory as a [Draft] (from a git source, an archive or
// another base plus a patch, by package source), checked entry by entry as it
// is built, and written to disk as one packfile only once it is whole: a
// refused source leaves nothing behind. A packfile fetched from a git host
// is checked on disk before any of it is inflated into the draft.
package bases

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/google/uuid"
)

// ErrNoBase is returned by Open for a journey without a recorded base.
var ErrNoBase = errors.New("no recorded base")

// baseRef names the base commit inside a base repository.
const baseRef = plumbing.ReferenceName("refs/meshwork/base")

// Store is a directory of base repositories. It is safe for concurrent use
// as long as one journey's base is written by one caller at a time (the
// marketplace spawns a journey once at a time).
type Store struct {
	dir string
}

// NewStore returns a store in dir, creating it (mode 0700: bases hold users'
// code) if needed.
func NewStore(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("bases: no directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("bases: creating %s: %w", dir, err)
	}
	// Bases hold users' code: only the marketplace may read them, also in
	// a directory made before it started.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("bases: %w", err)
	}
	return &Store{dir: dir}, nil
}

// Journeys lists the journeys the store holds a base of.
func (s *Store) Journeys() ([]uuid.UUID, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("bases: %w", err)
	}
	var out []uuid.UUID
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), ".git"); ok {
			if uid, err := uuid.Parse(id); err == nil {
				out = append(out, uid)
			}
		}
	}
	return out, nil
}

// draftAge is how old a draft directory (or a fetched packfile) must be for
// PruneDrafts to take it for a leftover of an interrupted Keep (or fetch)
// rather than one in progress.
const draftAge = time.Hour

// PruneDrafts removes the drafts an interrupted Keep left, and the packfiles
// an interrupted fetch left, and returns how many.
func (s *Store) PruneDrafts(now time.Time) (int, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("bases: %w", err)
	}
	removed := 0
	for _, e := range entries {
		info, err := e.Info()
		if !strings.HasPrefix(e.Name(), scratchPrefix) || err != nil || now.Sub(info.ModTime()) < draftAge {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return removed, fmt.Errorf("bases: %w", err)
		}
		removed++
	}
	return removed, nil
}

// NewDraft returns an empty draft whose fetched packfiles wait in the
// store's directory, on the disk the base will be written to.
func (s *Store) NewDraft(limits Limits) *Draft { return newDraft(limits, s.dir) }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(journey uuid.UUID) string {
	return filepath.Join(s.dir, journey.String()+".git")
}

// Record is what the marketplace stores of a base beside the journey.
type Record struct {
	// Commit is the base commit: what diffs compare against.
	Commit plumbing.Hash
	// Origin is the commit of a git source the base descends from (the
	// source's own commit, so a bundle built on it fetches into the user's
	// clone); zero when the base did not come from git.
	Origin plumbing.Hash
}

// Keep writes a finished draft as the journey's base, replacing any earlier
// one (a fresh respawn), and returns its record. The draft's objects go into
// one packfile; the repository appears under its final name only once it is
// complete.
func (s *Store) Keep(journey uuid.UUID, d *Draft) (Record, error) {
	if d.commit.IsZero() {
		return Record{}, errors.New("bases: the draft has no commit")
	}
	tmp, err := os.MkdirTemp(s.dir, scratchPrefix)
	if err != nil {
		return Record{}, fmt.Errorf("bases: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }() // gone once renamed; a leftover on failure
	repo, err := git.PlainInit(tmp, true)
	if err != nil {
		return Record{}, fmt.Errorf("bases: creating a repository: %w", err)
	}
	hashes, err := reachable(d.mem, d.commit, d.origin)
	if err != nil {
		return Record{}, err
	}
	if err := writePack(repo.Storer, d.mem, hashes); err != nil {
		return Record{}, err
	}
	if err := repo.Storer.SetReference(plumbing.NewHashReference(baseRef, d.commit)); err != nil {
		return Record{}, fmt.Errorf("bases: %w", err)
	}
	if sh, _ := d.mem.Shallow(); len(sh) > 0 {
		if err := repo.Storer.SetShallow(sh); err != nil {
			return Record{}, fmt.Errorf("bases: %w", err)
		}
	}
	final := s.path(journey)
	if err := os.RemoveAll(final); err != nil {
		return Record{}, fmt.Errorf("bases: removing the old base: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return Record{}, fmt.Errorf("bases: %w", err)
	}
	return Record{Commit: d.commit, Origin: d.origin}, nil
}

// Remove deletes a journey's base; a missing one is not an error.
func (s *Store) Remove(journey uuid.UUID) error {
	if err := os.RemoveAll(s.path(journey)); err != nil {
		return fmt.Errorf("bases: removing the base of %s: %w", journey, err)
	}
	return nil
}

// Open returns a journey's base at the recorded commit. It fails with
// ErrNoBase when the journey has none.
func (s *Store) Open(journey uuid.UUID, rec Record) (*Base, error) {
	if rec.Commit.IsZero() {
		return nil, ErrNoBase
	}
	dir := s.path(journey)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: the repository of %s is missing", ErrNoBase, journey)
	}
	// Packfiles stay open for the Base's life: a diff reads thousands of
	// objects, and reopening the pack for each costs more than reading it.
	st := filesystem.NewStorageWithOptions(osfs.New(dir, osfs.WithBoundOS()), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: true})
	repo, err := git.Open(st, nil)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("bases: opening the base of %s: %w", journey, err)
	}
	c, err := repo.CommitObject(rec.Commit)
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("bases: the base commit %s of %s: %w", rec.Commit, journey, err)
	}
	tree, err := c.Tree()
	if err != nil {
		_ = st.Close()
		return nil, fmt.Errorf("bases: the base tree of %s: %w", journey, err)
	}
	return &Base{Record: rec, repo: repo, st: st, commit: c, tree: tree}, nil
}

// Base is an opened base.
type Base struct {
	Record
	repo   *git.Repository
	st     *filesystem.Storage
	commit *object.Commit
	tree   *object.Tree
}

// Close releases the base's open files. Closing a nil Base does nothing.
func (b *Base) Close() error {
	if b == nil {
		return nil
	}
	return b.st.Close()
}

// Storer is the base repository's object store, to read blobs from.
func (b *Base) Storer() storer.EncodedObjectStorer { return b.repo.Storer }

// Tree is the base commit's tree.
func (b *Base) Tree() *object.Tree { return b.tree }

// Commit is the base commit.
func (b *Base) Commit() *object.Commit { return b.commit }

// Files lists the base's files by path.
// It was checked when the draft took it, so it is walked without a bound.
func (b *Base) Files() (map[string]Entry, error) { return Flatten(b.tree, 0) }

// Blob reads a blob of the base, at most limit bytes (it fails beyond).
func (b *Base) Blob(h plumbing.Hash, limit int64) ([]byte, error) {
	return readBlob(b.repo.Storer, h, limit)
}

func readBlob(s ObjectReader, h plumbing.Hash, limit int64) ([]byte, error) {
	obj, err := s.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, fmt.Errorf("bases: blob %s: %w", h, err)
	}
	if obj.Size() > limit {
		return nil, fmt.Errorf("bases: blob %s is %d bytes; the limit is %d", h, obj.Size(), limit)
	}
	r, err := obj.Reader()
	if err != nil {
		return nil, fmt.Errorf("bases: blob %s: %w", h, err)
	}
	defer r.Close()
	return io.ReadAll(r)
}

// reachable lists the objects of m that the base commit and its origin
// reach: their history down to m's shallow commits, and the trees and blobs
// of that history. Nothing else of m becomes the base: a fetch of a commit
// from a server that serves commits by id only through its refs brings
// every branch and tag, and those would otherwise reach the worker's .git.
//
// Only the tips were checked (their trees, file by file, when the draft
// took them); older history is as the source had it. What m does not hold,
// or holds as another type, is left out rather than refused: a base does
// not need its history whole, and Keep runs after the worker exists. The
// walk keeps its own stack, so no depth of trees can exhaust the
// goroutine's.
func reachable(m *memory.Storage, tips ...plumbing.Hash) ([]plumbing.Hash, error) {
	shallow, err := m.Shallow()
	if err != nil {
		return nil, fmt.Errorf("bases: %w", err)
	}
	seen := map[plumbing.Hash]bool{}
	var out []plumbing.Hash
	// add records h once, if m holds it as t.
	add := func(h plumbing.Hash, t plumbing.ObjectType) bool {
		if seen[h] {
			return false
		}
		if _, err := m.EncodedObject(t, h); err != nil {
			return false
		}
		seen[h] = true
		out = append(out, h)
		return true
	}
	var commits, trees []plumbing.Hash
	for _, h := range tips {
		if h.IsZero() {
			continue
		}
		if _, err := object.GetCommit(m, h); err != nil {
			return nil, fmt.Errorf("bases: commit %s: %w", h, err)
		}
		commits = append(commits, h)
	}
	for len(commits) > 0 {
		h := commits[0]
		commits = commits[1:]
		if !add(h, plumbing.CommitObject) {
			continue
		}
		c, err := object.GetCommit(m, h)
		if err != nil {
			continue
		}
		trees = append(trees, c.TreeHash)
		for len(trees) > 0 {
			t := trees[len(trees)-1]
			trees = trees[:len(trees)-1]
			if !add(t, plumbing.TreeObject) {
				continue
			}
			tree, err := object.GetTree(m, t)
			if err != nil {
				continue
			}
			for _, e := range tree.Entries {
				switch e.Mode {
				case filemode.Dir:
					trees = append(trees, e.Hash)
				case filemode.Submodule: // another repository's commit
				default:
					add(e.Hash, plumbing.BlobObject)
				}
			}
		}
		if !slices.Contains(shallow, h) {
			commits = append(commits, c.ParentHashes...)
		}
	}
	return out, nil
}

// writePack encodes the objects hashes of src as one packfile into dst.
func writePack(dst storer.Storer, src storer.EncodedObjectStorer, hashes []plumbing.Hash) error {
	pw, ok := dst.(storer.PackfileWriter)
	if !ok {
		return errors.New("bases: the repository cannot take packfiles")
	}
	w, err := pw.PackfileWriter()
	if err != nil {
		return fmt.Errorf("bases: %w", err)
	}
	if err := WritePack(w, src, hashes); err != nil {
		_ = w.Close()
		return fmt.Errorf("bases: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("bases: writing the packfile: %w", err)
	}
	return nil
}

// WritePack writes hashes of src as a packfile to w. There is no delta
// search (window 0): packs here are written once and read a few times, and
// compression per object is enough.
func WritePack(w io.Writer, src storer.EncodedObjectStorer, hashes []plumbing.Hash) error {
	if _, err := packfile.NewEncoder(w, src, false).Encode(hashes, 0); err != nil {
		return fmt.Errorf("writing the packfile: %w", err)
	}
	return nil
}

// WriteTar writes the base's files as a tar stream to seed a workspace with,
// owned by owner, modified now.
func (b *Base) WriteTar(w io.Writer, owner Owner) error {
	files, err := b.Files()
	if err != nil {
		return err
	}
	return WriteTar(w, b.repo.Storer, files, owner, time.Now())
}

// OriginObjects lists the trees and blobs of the origin commit's tree: what
// a clone that has the origin commit has already.
func (b *Base) OriginObjects() (map[plumbing.Hash]bool, error) {
	c, err := b.repo.CommitObject(b.Origin)
	if err != nil {
		return nil, fmt.Errorf("bases: the origin commit %s: %w", b.Origin, err)
	}
	t, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("bases: the origin tree: %w", err)
	}
	have := map[plumbing.Hash]bool{t.Hash: true}
	walker := object.NewTreeWalker(t, true, nil)
	defer walker.Close()
	for {
		_, e, err := walker.Next()
		if errors.Is(err, io.EOF) {
			return have, nil
		}
		if err != nil {
			return nil, fmt.Errorf("bases: reading the origin tree: %w", err)
		}
		have[e.Hash] = true
	}
}

// ObjectReader reads objects by hash: a repository's store, or a
// workdiff.Change (its changed files over its base).
type ObjectReader interface {
	EncodedObject(plumbing.ObjectType, plumbing.Hash) (plumbing.EncodedObject, error)
}
