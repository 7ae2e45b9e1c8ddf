package bases

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/google/uuid"
)

// WorkspaceBranch is the branch a seeded workspace's .git has checked out.
const WorkspaceBranch = "main"

// GitDir returns what writes a .git directory into a workspace tar: the
// base commit checked out on WorkspaceBranch, the base's objects (its
// packfile, and its shallow list), and an index of files, so that the
// worker starts in a clean checkout of its source, with git status, diff
// and log working. The worker may rewrite all of it: the marketplace never
// reads it back; diffs compare with the base in the store.
func (s *Store) GitDir(journey uuid.UUID, rec Record, files map[string]Entry) TarExtra {
	return func(tw *tar.Writer, owner Owner, mtime time.Time) error {
		dir := s.path(journey)
		add := func(name string, mode int64, data []byte) error {
			hdr := &tar.Header{
				Name: ".git/" + name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)),
				Uid: owner.UID, Gid: owner.GID, ModTime: mtime, Format: tar.FormatPAX,
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			_, err := tw.Write(data)
			return err
		}
		for _, d := range []string{"", "objects", "objects/pack", "objects/info", "refs", "refs/heads", "refs/tags"} {
			if err := tw.WriteHeader(&tar.Header{
				Name: filepath.ToSlash(filepath.Join(".git", d)) + "/", Typeflag: tar.TypeDir, Mode: 0o755,
				Uid: owner.UID, Gid: owner.GID, ModTime: mtime, Format: tar.FormatPAX,
			}); err != nil {
				return err
			}
		}
		idx, err := encodeIndex(files, mtime)
		if err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			data []byte
		}{
			{"HEAD", []byte("ref: refs/heads/" + WorkspaceBranch + "\n")},
			{"config", []byte("[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n")},
			{"refs/heads/" + WorkspaceBranch, []byte(rec.Commit.String() + "\n")},
			{"index", idx},
		} {
			if err := add(f.name, 0o644, f.data); err != nil {
				return err
			}
		}
		if sh, err := os.ReadFile(filepath.Join(dir, "shallow")); err == nil {
			if err := add("shallow", 0o644, sh); err != nil {
				return err
			}
		}
		packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "pack-*"))
		if err != nil {
			return err
		}
		for _, p := range packs {
			if err := addFile(tw, ".git/objects/pack/"+filepath.Base(p), p, owner, mtime); err != nil {
				return err
			}
		}
		return nil
	}
}

// addFile copies a file of the base store into the tar, read-only (as git
// keeps packfiles).
func addFile(tw *tar.Writer, name, path string, owner Owner, mtime time.Time) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{
		Name: name, Typeflag: tar.TypeReg, Mode: 0o444, Size: st.Size(),
		Uid: owner.UID, Gid: owner.GID, ModTime: mtime, Format: tar.FormatPAX,
	}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, st.Size()); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// encodeIndex writes a git index (version 2) of files, modified at mtime.
// Git finds the other stat fields changed and compares content once.
func encodeIndex(files map[string]Entry, mtime time.Time) ([]byte, error) {
	names := make([]string, 0, len(files))
	for p := range files {
		names = append(names, p)
	}
	sort.Strings(names) // git orders index entries by name, bytewise
	idx := &index.Index{Version: 2}
	for _, p := range names {
		e := files[p]
		idx.Entries = append(idx.Entries, &index.Entry{Name: p, Hash: e.Hash, Mode: e.Mode, Size: uint32(max(e.Size, 0)), ModifiedAt: mtime})
	}
	var buf bytes.Buffer
	if err := index.NewEncoder(&buf).Encode(idx); err != nil {
		return nil, fmt.Errorf("writing the index: %w", err)
	}
	return buf.Bytes(), nil
}
