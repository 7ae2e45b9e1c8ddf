package workdiff_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/workdiff"
)

// untar unpacks a tar into dir (the test's stand-in for a workspace).
func untar(t *testing.T, r io.Reader, dir string) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				t.Fatal(err)
			}
		default:
			b, _ := io.ReadAll(tr)
			if err := os.WriteFile(p, b, os.FileMode(hdr.Mode)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tarDir tars a directory the way the runtime exports a workspace.
func tarDir(t *testing.T, dir string) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func TestLoopFromLocalGitToApplyAndBundle(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := gittest.Repo(t, filepath.Join(root, "repo"), map[string]string{
		"go.mod":         "module example.com/m\n\ngo 1.19\n",
		"calc.go":        "package m\n\nfunc Add(a, b int) int { return a - b }\n",
		"docs/old.md":    "# Old\nunchanged text\n",
		"docs/remove.md": "bye\n",
	})
	d, rec := fetchGit(t, root, "file://"+repo)
	head := gittest.Head(t, repo)
	if rec.Commit != head || rec.Files != 4 {
		t.Fatalf("record %+v, want commit %s and 4 files", rec, head)
	}
	store, err := bases.NewStore(filepath.Join(root, "bases"))
	if err != nil {
		t.Fatal(err)
	}
	base := keepAndOpen(t, store, d)
	ws := filepath.Join(root, "ws")
	seedWorkspace(t, base, ws)

	// The worker's work: a fix, a new file, a deletion, a rename, and a
	// rewritten .git that must not matter.
	os.WriteFile(filepath.Join(ws, "calc.go"), []byte("package m\n\nfunc Add(a, b int) int { return a + b }\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "calc_test.go"), []byte("package m\n"), 0o644)
	os.Remove(filepath.Join(ws, "docs/remove.md"))
	os.Rename(filepath.Join(ws, "docs/old.md"), filepath.Join(ws, "docs/new.md"))
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git", "HEAD"), []byte("lies\n"), 0o644)
	os.MkdirAll(filepath.Join(ws, ".meshwork/home"), 0o755)
	os.WriteFile(filepath.Join(ws, ".meshwork/home/session"), []byte("private\n"), 0o644)

	ch, err := workdiff.Compute(base, tarDir(t, ws), workdiff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := ch.Summary
	if s.Added != 1 || s.Modified != 1 || s.Deleted != 1 || s.Renamed != 1 || s.FilesChanged != 4 {
		t.Fatalf("summary %+v\n%s", s, ch.Patch)
	}
	for _, f := range s.Files {
		if f.Status == meshtype.ChangeRenamed && (f.OldPath != "docs/old.md" || f.Path != "docs/new.md") {
			t.Errorf("rename %+v", f)
		}
	}
	if s.LinesAdded != 2 || s.LinesDeleted != 2 {
		t.Errorf("lines +%d -%d, want +2 -2\n%s", s.LinesAdded, s.LinesDeleted, ch.Patch)
	}

	// The patch applies with the real git in a fresh clone.
	clone := filepath.Join(root, "clone")
	gittest.Run(t, root, "clone", "-q", repo, clone)
	patchFile := filepath.Join(root, "change.patch")
	os.WriteFile(patchFile, ch.Patch, 0o644)
	gittest.Run(t, clone, "apply", "--check", patchFile)
	gittest.Run(t, clone, "apply", patchFile)
	if got, _ := os.ReadFile(filepath.Join(clone, "calc.go")); !strings.Contains(string(got), "a + b") {
		t.Errorf("calc.go after apply: %s", got)
	}
	if _, err := os.Stat(filepath.Join(clone, "docs/new.md")); err != nil {
		t.Errorf("rename not applied: %v", err)
	}

	// The bundle fetches into another clone that has the base commit.
	var bundle bytes.Buffer
	commit, err := ch.WriteBundle(&bundle, "change", time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	bundleFile := filepath.Join(root, "change.bundle")
	os.WriteFile(bundleFile, bundle.Bytes(), 0o644)
	clone2 := filepath.Join(root, "clone2")
	gittest.Run(t, root, "clone", "-q", repo, clone2)
	gittest.Run(t, clone2, "bundle", "verify", bundleFile)
	gittest.Run(t, clone2, "fetch", "-q", bundleFile, "refs/heads/meshwork:refs/heads/meshwork")
	if got := strings.TrimSpace(gittest.Run(t, clone2, "rev-parse", "meshwork")); got != commit.String() {
		t.Errorf("fetched %s, want %s", got, commit)
	}
	if got := strings.TrimSpace(gittest.Run(t, clone2, "rev-parse", "meshwork^")); got != head {
		t.Errorf("bundle commit's parent %s, want the source commit %s", got, head)
	}
	if out := gittest.Run(t, clone2, "diff", "--stat", "HEAD", "meshwork"); !strings.Contains(out, "4 files changed") {
		t.Errorf("bundle diff: %s", out)
	}
	// Taken again at the same time, the bundle and the tar are the same
	// bytes (the store's object order and the clock do not show).
	var again bytes.Buffer
	if c, err := ch.WriteBundle(&again, "change", time.Unix(1700000000, 0)); err != nil || c != commit || !bytes.Equal(again.Bytes(), bundle.Bytes()) {
		t.Errorf("the bundle taken again: commit %s (first %s), %v, same bytes %v", c, commit, err, bytes.Equal(again.Bytes(), bundle.Bytes()))
	}
	var tar1, tar2 bytes.Buffer
	owner := bases.Owner{UID: 1000, GID: 1000}
	if err := ch.WriteTar(&tar1, owner, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	if err := ch.WriteTar(&tar2, owner, time.Unix(1700000000, 0)); err != nil || !bytes.Equal(tar1.Bytes(), tar2.Bytes()) {
		t.Errorf("the tar taken again: %v, same bytes %v", err, bytes.Equal(tar1.Bytes(), tar2.Bytes()))
	}
	if hdr, err := tar.NewReader(&tar1).Next(); err != nil || !hdr.ModTime.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("the tar's first entry: %+v, %v; want it dated as asked", hdr, err)
	}

	// The patch seeds another journey: base plus patch equals the workspace.
	d2 := bases.NewDraft(bases.Limits{})
	if _, err := source.Patch(base, "first", string(ch.Patch), d2); err != nil {
		t.Fatal(err)
	}
	base2 := keepAndOpen(t, store, d2)
	ch2, err := workdiff.Compute(base2, tarDir(t, ws), workdiff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ch2.Summary.FilesChanged != 0 || len(ch2.Patch) != 0 {
		t.Errorf("the patched base differs from the workspace: %+v\n%s", ch2.Summary, ch2.Patch)
	}
}

// keep opens a base made from a local repository of files.
func keep(t *testing.T, files map[string]string, links map[string]string) (*bases.Base, string) {
	t.Helper()
	root := t.TempDir()
	repo := gittest.Repo(t, filepath.Join(root, "repo"), files)
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(repo, p)); err != nil {
			t.Fatal(err)
		}
	}
	if len(links) > 0 {
		gittest.Run(t, repo, "add", "-A")
		gittest.Run(t, repo, "commit", "-q", "-m", "links")
	}
	d, _ := fetchGit(t, root, repo)
	store, err := bases.NewStore(filepath.Join(root, "bases"))
	if err != nil {
		t.Fatal(err)
	}
	return keepAndOpen(t, store, d), repo
}

// fetchGit fetches the repository at url, which must lie under root, into a
// new draft the way spawn_worker's git source does, and returns the draft
// and the source's record.
func fetchGit(t *testing.T, root, url string) (*bases.Draft, source.Record) {
	t.Helper()
	pol := &source.Policy{Roots: []string{root}}
	if err := pol.CheckRoots(); err != nil {
		t.Fatal(err)
	}
	d := bases.NewDraft(bases.Limits{})
	rec, err := pol.Git(context.Background(), "alice", &source.GitSpec{URL: url}, d)
	if err != nil {
		t.Fatal(err)
	}
	return d, rec
}

// keepAndOpen keeps d in store as a new journey's base and opens it; the
// base is closed when the test ends.
func keepAndOpen(t *testing.T, store *bases.Store, d *bases.Draft) *bases.Base {
	t.Helper()
	j := uuid.New()
	rec, err := store.Keep(j, d)
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.Open(j, rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// seedWorkspace unpacks base into the directory ws, as a worker's workspace
// is seeded from its journey's base.
func seedWorkspace(t *testing.T, base *bases.Base, ws string) {
	t.Helper()
	var seed bytes.Buffer
	if err := base.WriteTar(&seed, bases.Owner{UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatal(err)
	}
	untar(t, &seed, ws)
}

// Type changes (a file becoming a link and back), binary files, private
// paths in any case, and a view of some paths.
func TestChangeKinds(t *testing.T) {
	t.Parallel()
	// z/big.txt, unchanged, comes last and is longer than every file before
	// it; e.txt is emptied. (The buffer files are read into:
	// TestHashFileReusesItsBuffer.)
	base, repo := keep(t, map[string]string{
		"a.txt": "a\n", "b.txt": "b\n", "bin.dat": "x\x00y", "docs/c.md": "c\n", "e.txt": "e\n",
		"z/big.txt": strings.Repeat("unchanged\n", 1000),
	}, map[string]string{"link": "a.txt"})
	ws := t.TempDir()
	seedWorkspace(t, base, ws)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(filepath.Join(ws, "link")))
	must(os.WriteFile(filepath.Join(ws, "link"), []byte("now a file\n"), 0o644))
	must(os.Remove(filepath.Join(ws, "b.txt")))
	must(os.Symlink("a.txt", filepath.Join(ws, "b.txt")))
	must(os.WriteFile(filepath.Join(ws, "bin.dat"), []byte("z\x00z"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "docs/c.md"), []byte("c2\n"), 0o644))
	must(os.WriteFile(filepath.Join(ws, "e.txt"), nil, 0o644))
	must(os.MkdirAll(filepath.Join(ws, ".MESHWORK"), 0o755))
	must(os.WriteFile(filepath.Join(ws, ".MESHWORK/cache"), []byte("private\n"), 0o644))

	ch, err := workdiff.Compute(base, tarDir(t, ws), workdiff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := ch.Summary
	// link and b.txt each: a deletion and an addition; bin.dat, c.md and
	// e.txt (emptied) modified.
	if s.Added != 2 || s.Deleted != 2 || s.Modified != 3 || len(s.Binary) != 1 || s.Binary[0] != "bin.dat" {
		t.Fatalf("summary %+v\n%s", s, ch.Patch)
	}
	for _, f := range s.Files {
		if f.Path == "b.txt" && f.Status == meshtype.ChangeAdded && f.LinkTarget != "a.txt" {
			t.Errorf("b.txt's link target %q", f.LinkTarget)
		}
		if strings.Contains(strings.ToLower(f.Path), ".meshwork") {
			t.Errorf("a private path in the change: %+v", f)
		}
	}
	clone := filepath.Join(t.TempDir(), "clone")
	gittest.Run(t, filepath.Dir(clone), "clone", "-q", repo, clone)
	pf := filepath.Join(filepath.Dir(clone), "p.patch")
	must(os.WriteFile(pf, ch.Patch, 0o644))
	gittest.Run(t, clone, "apply", "--check", pf)
	gittest.Run(t, clone, "apply", pf)
	if target, err := os.Readlink(filepath.Join(clone, "b.txt")); err != nil || target != "a.txt" {
		t.Errorf("b.txt after git apply: %q, %v", target, err)
	}
	for _, name := range []string{"docs/c.md", "e.txt", "link", "z/big.txt"} {
		got, err := os.ReadFile(filepath.Join(clone, name))
		want, _ := os.ReadFile(filepath.Join(ws, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s after git apply: %q, %v; want %q", name, got, err, want)
		}
	}

	only, patch := ch.Only([]string{"docs"})
	if only.FilesChanged != 1 || only.Files[0].Path != "docs/c.md" || !bytes.Contains(patch, []byte("+c2")) || bytes.Contains(patch, []byte("b.txt")) {
		t.Errorf("the view of docs/: %+v\n%s", only, patch)
	}
}

// A hard link is resolved to the file it shares content with; one to a
// private file is refused, not dropped (it would hide the file's change).
func TestHardLinks(t *testing.T) {
	t.Parallel()
	base, _ := keep(t, map[string]string{"main.go": "package main\n"}, nil)
	build := func(entries ...*tar.Header) io.Reader {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		_ = tw.Close()
		return &buf
	}
	ch, err := workdiff.Compute(base, build(
		&tar.Header{Name: "main.go", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
		&tar.Header{Name: "copy.go", Typeflag: tar.TypeLink, Linkname: "main.go"},
	), workdiff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Summary.Added != 1 || ch.Summary.Modified != 1 {
		t.Errorf("summary %+v", ch.Summary)
	}
	_, err = workdiff.Compute(base, build(
		&tar.Header{Name: ".meshwork/x", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
		&tar.Header{Name: "main.go", Typeflag: tar.TypeLink, Linkname: ".meshwork/x"},
	), workdiff.Options{})
	if err == nil || !strings.Contains(err.Error(), `"main.go" is a hard link to ".meshwork/x"`) {
		t.Errorf("a hard link to a private file: %v", err)
	}
}

// Links that each stay inside the workspace but chain through each other
// (a/up -> .. and x -> a/up/.., the workspace's parent) make no change: the
// result gate checks each changed link alone, and a checkout would resolve
// the chain outside. A link to a link's own path, as the last segment, is
// no chain.
func TestLinkChainsAreRefused(t *testing.T) {
	t.Parallel()
	base, _ := keep(t, map[string]string{"main.go": "package main\n", "a/keep": "k\n"}, nil)
	export := func(links ...[2]string) io.Reader {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range []*tar.Header{
			{Name: "main.go", Typeflag: tar.TypeReg, Size: 13, Mode: 0o644},
			{Name: "a/keep", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644},
		} {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			_, _ = tw.Write([]byte(map[string]string{"main.go": "package main\n", "a/keep": "k\n"}[h.Name]))
		}
		for _, l := range links {
			if err := tw.WriteHeader(&tar.Header{Name: l[0], Typeflag: tar.TypeSymlink, Linkname: l[1]}); err != nil {
				t.Fatal(err)
			}
		}
		_ = tw.Close()
		return &buf
	}
	_, err := workdiff.Compute(base, export([2]string{"a/up", ".."}, [2]string{"x", "a/up/.."}), workdiff.Options{})
	if !errors.Is(err, workdiff.ErrUnexportable) || !strings.Contains(err.Error(), `symbolic link "x" points through the symbolic link "a/up"`) {
		t.Errorf("a chain of links: %v", err)
	}
	ch, err := workdiff.Compute(base, export([2]string{"a/up", ".."}, [2]string{"x", "a/up"}), workdiff.Options{})
	if err != nil || ch.Summary.Added != 2 {
		t.Errorf("a link to a link, as its last segment: %v, %+v", err, ch)
	}
}

// What the diff holds is bounded before it is read: a changed file past the
// budget is refused from its header (a sparse file of a terabyte costs the
// worker no disk, and reading it would take hours), as are links' targets
// past the budget and more entries than MaxEntries.
func TestBoundsBeforeReading(t *testing.T) {
	t.Parallel()
	base, _ := keep(t, map[string]string{"main.go": "package main\n"}, nil)
	var huge bytes.Buffer
	tw := tar.NewWriter(&huge)
	// The header alone: the content never comes, and must not be waited for.
	if err := tw.WriteHeader(&tar.Header{Name: "sparse.img", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	named := func(n int, pattern, link string) io.Reader {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := range n {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf(pattern, i), Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
				t.Fatal(err)
			}
		}
		if link != "" {
			if err := tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: link}); err != nil {
				t.Fatal(err)
			}
		}
		_ = tw.Close()
		return &buf
	}
	files := func(n int, link string) io.Reader { return named(n, "f%d", link) }
	for _, tt := range []struct {
		name string
		tar  io.Reader
		opts workdiff.Options
		want string
	}{
		{"a terabyte file", &huge, workdiff.Options{}, `"sparse.img" (1099511627776 bytes)`},
		{"too many entries", files(5, ""), workdiff.Options{MaxEntries: 3}, "more than 3 files and directories"},
		{"a long link target", files(1, strings.Repeat("a/", 100)+"b"), workdiff.Options{MaxChangedBytes: 100}, "the links' targets"},
		{"a path past the gate's limit", named(1, strings.Repeat("d/", 2100)+"f%d", ""), workdiff.Options{}, "bytes; the limit is 4096"},
		{"paths too long together", named(20, strings.Repeat("d/", 20)+"f%d", ""), workdiff.Options{MaxNameBytes: 500}, "paths pass 500 bytes together"},
	} {
		_, err := workdiff.Compute(base, tt.tar, tt.opts)
		if !errors.Is(err, workdiff.ErrTooLarge) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrTooLarge with %q", tt.name, err, tt.want)
		}
	}
}

// The patch is bounded as it is written: deleting the base's files puts
// their text in the patch, which the changed files' budget does not count.
func TestPatchBound(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("a line of the base\n", 100)
	base, _ := keep(t, map[string]string{"a.txt": text, "b.txt": text}, nil)
	var empty bytes.Buffer
	_ = tar.NewWriter(&empty).Close()
	_, err := workdiff.Compute(base, bytes.NewReader(empty.Bytes()), workdiff.Options{MaxPatchBytes: 3000})
	if !errors.Is(err, workdiff.ErrTooLarge) || !strings.Contains(err.Error(), `the patch passes 3000 bytes at "b.txt"`) {
		t.Errorf("deleting both files with a 3000-byte bound: %v", err)
	}
	ch, err := workdiff.Compute(base, bytes.NewReader(empty.Bytes()), workdiff.Options{})
	if err != nil || ch.Summary.Deleted != 2 {
		t.Errorf("deleting both files: %v, %+v", err, ch)
	}
}

// A patch reaches MCP clients as JSON text: what it carries survives that
// as it is, and applies with git. Text that is not UTF-8 and binary files
// are carried in git's binary form (JSON would replace their bytes): added,
// changed and deleted, byte for byte; a file past MaxTextBytes is listed
// and omitted. Names another file system takes for .git are left out, as
// .git is (git refuses them, and the whole patch with them).
func TestPatchSurvivesJSON(t *testing.T) {
	t.Parallel()
	base, repo := keep(t, map[string]string{
		"latin1.txt": "caf\xe9\n", "notes.md": "one\n", "old-latin.txt": "na\xefve\n", "run.sh": "echo caf\xe9\n",
		"gone.bin": "\x00\x01\x02", "big.txt": "small\n", "mode\"x.sh": "echo\n",
	}, nil)
	ws := t.TempDir()
	seedWorkspace(t, base, ws)
	// A rename and a mode change that keep content that is not UTF-8 are
	// headers only: they are in the patch.
	if err := os.Rename(filepath.Join(ws, "old-latin.txt"), filepath.Join(ws, "new-latin.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ws, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws, "gone.bin")); err != nil {
		t.Fatal(err)
	}
	// A mode change alone and an empty new file have no "---" and "+++"
	// lines either: git reads their names from the header.
	if err := os.Chmod(filepath.Join(ws, "mode\"x.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	logo := bytes.Repeat([]byte("\x89PNG\r\n\x1a\n\x00\xff"), 80)
	for name, content := range map[string]string{
		"latin1.txt": "caf\xe9s\n", "notes.md": "one\ntwo \u00e9t\u00e9\n", "logo.png": string(logo),
		// Names git writes quoted, for a binary change's header.
		"q\"u.bin": "\x00quote", "dir with space/\u00e9t\u00e9.bin": "\x00space", "empty\"file": "",
		"big.txt":                   strings.Repeat("a longer line\n", 100),
		".git./hooks/post-checkout": "#!/bin/sh\n", "sub/GIT~1/config": "[core]\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := workdiff.Compute(base, tarDir(t, ws), workdiff.Options{MaxTextBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if s := ch.Summary; s.FilesChanged != 11 || strings.Join(s.Binary, " ") != "big.txt dir with space/\u00e9t\u00e9.bin gone.bin latin1.txt logo.png q\"u.bin" || strings.Join(s.Omitted, " ") != "big.txt" {
		t.Fatalf("summary %+v\n%s", s, ch.Patch)
	}
	wire, err := json.Marshal(string(ch.Patch))
	if err != nil {
		t.Fatal(err)
	}
	var received string
	if err := json.Unmarshal(wire, &received); err != nil {
		t.Fatal(err)
	}
	if received != string(ch.Patch) {
		t.Fatalf("the patch changed on its way through JSON:\n%q\n%q", ch.Patch, received)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	gittest.Run(t, filepath.Dir(clone), "clone", "-q", repo, clone)
	pf := filepath.Join(filepath.Dir(clone), "p.patch")
	if err := os.WriteFile(pf, []byte(received), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, clone, "apply", pf)
	if got, _ := os.ReadFile(filepath.Join(clone, "notes.md")); string(got) != "one\ntwo \u00e9t\u00e9\n" {
		t.Errorf("notes.md after git apply: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(clone, "new-latin.txt")); string(got) != "na\xefve\n" {
		t.Errorf("the renamed file after git apply: %q", got)
	}
	for _, name := range []string{"run.sh", "mode\"x.sh"} {
		if fi, err := os.Stat(filepath.Join(clone, name)); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s after git apply is not executable: %v", name, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(clone, "empty\"file")); err != nil || fi.Size() != 0 {
		t.Errorf("the empty new file after git apply: %v", err)
	}
	for name, want := range map[string]string{"latin1.txt": "caf\xe9s\n", "logo.png": string(logo), "big.txt": "small\n", "q\"u.bin": "\x00quote", "dir with space/\u00e9t\u00e9.bin": "\x00space"} {
		if got, err := os.ReadFile(filepath.Join(clone, name)); err != nil || string(got) != want {
			t.Errorf("%s after git apply: %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(clone, "gone.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gone.bin after git apply: %v; want it deleted", err)
	}
	// And back: git takes the reverse of each binary change too.
	gittest.Run(t, clone, "apply", "-R", pf)
	if out := gittest.Run(t, clone, "status", "--porcelain"); out != "" {
		t.Errorf("after git apply -R, the clone differs from the base:\n%s", out)
	}

	// The patch seeds another journey (source: journey and patch), binary
	// changes too: base plus patch is the workspace but for the file the
	// patch omits.
	store, err := bases.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := bases.NewDraft(bases.Limits{})
	if _, err := source.Patch(base, "first", received, d); err != nil {
		t.Fatal(err)
	}
	ch2, err := workdiff.Compute(keepAndOpen(t, store, d), tarDir(t, ws), workdiff.Options{MaxTextBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if s := ch2.Summary; s.FilesChanged != 1 || s.Files[0].Path != "big.txt" {
		t.Errorf("the patched base differs from the workspace: %+v\n%s", s, ch2.Patch)
	}
}

// A patch carries at most MaxBinaryBytes of binary content: the binary
// files past it are listed and omitted.
func TestBinaryBudget(t *testing.T) {
	t.Parallel()
	base, _ := keep(t, map[string]string{"README.md": "r\n"}, nil)
	ws := t.TempDir()
	seedWorkspace(t, base, ws)
	for _, name := range []string{"a.bin", "b.bin", "c.txt"} {
		content := strings.Repeat("\x00", 600)
		if name == "c.txt" {
			content = "text\n"
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := workdiff.Compute(base, tarDir(t, ws), workdiff.Options{MaxBinaryBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if s := ch.Summary; strings.Join(s.Binary, " ") != "a.bin b.bin" || strings.Join(s.Omitted, " ") != "b.bin" {
		t.Errorf("binary %q, omitted %q; want a.bin carried and b.bin omitted", s.Binary, s.Omitted)
	}
	if p := string(ch.Patch); !strings.Contains(p, "a/a.bin") || strings.Contains(p, "b.bin") || !strings.Contains(p, "+text") {
		t.Errorf("patch:\n%s", p)
	}
}

// A change's digest is the workspace's: the same files give the same
// digest, and a change to a file the patch leaves out, which leaves the
// patch as it was, gives another. A private file changes nothing; a view
// of some paths keeps the whole workspace's digest.
func TestDigest(t *testing.T) {
	t.Parallel()
	base, _ := keep(t, map[string]string{"README.md": "r\n"}, nil)
	ws := t.TempDir()
	seedWorkspace(t, base, ws)
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	compute := func() *workdiff.Change {
		t.Helper()
		ch, err := workdiff.Compute(base, tarDir(t, ws), workdiff.Options{MaxBinaryBytes: 100})
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	write("c.txt", "text\n")
	write("big.bin", strings.Repeat("\x00", 600)) // past the binary budget
	first := compute()
	if len(first.Summary.Digest) != 64 || strings.Join(first.Summary.Omitted, " ") != "big.bin" {
		t.Fatalf("digest %q, omitted %q", first.Summary.Digest, first.Summary.Omitted)
	}
	if again := compute(); again.Summary.Digest != first.Summary.Digest {
		t.Errorf("the same workspace: digest %s, then %s", first.Summary.Digest, again.Summary.Digest)
	}
	write(".meshwork/state", "private")
	if private := compute(); private.Summary.Digest != first.Summary.Digest {
		t.Errorf("a private file changed the digest")
	}
	if view, _ := first.Only([]string{"c.txt"}); view.Digest != first.Summary.Digest {
		t.Errorf("a view's digest %s, want the workspace's %s", view.Digest, first.Summary.Digest)
	}
	write("big.bin", strings.Repeat("\x00\x01", 300))
	moved := compute()
	if !bytes.Equal(moved.Patch, first.Patch) || moved.Summary.Digest == first.Summary.Digest {
		t.Errorf("the omitted file changed: patch equal %v, digest %s then %s; want the same patch and another digest", bytes.Equal(moved.Patch, first.Patch), first.Summary.Digest, moved.Summary.Digest)
	}
	if err := os.Chmod(filepath.Join(ws, "c.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if mode := compute(); mode.Summary.Digest == moved.Summary.Digest {
		t.Errorf("a mode change kept the digest")
	}
}

// A patch's binary hunk seeds a base only over the file it was made from,
// as git apply checks its index line: another content is refused, changed
// or deleted.
func TestBinaryPatchOnAnotherBase(t *testing.T) {
	t.Parallel()
	made, _ := keep(t, map[string]string{"a.bin": "\x00YYYY", "gone.bin": "\x00old"}, nil)
	ws := t.TempDir()
	seedWorkspace(t, made, ws)
	if err := os.WriteFile(filepath.Join(ws, "a.bin"), []byte("\x00ZZZZ"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws, "gone.bin")); err != nil {
		t.Fatal(err)
	}
	ch, err := workdiff.Compute(made, tarDir(t, ws), workdiff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := source.Patch(made, "first", string(ch.Patch), bases.NewDraft(bases.Limits{})); err != nil {
		t.Fatalf("on its own base: %v", err)
	}
	for name, files := range map[string]map[string]string{
		"a.bin":    {"a.bin": "\x00XXXX", "gone.bin": "\x00old"},
		"gone.bin": {"a.bin": "\x00YYYY", "gone.bin": "\x00other"},
	} {
		other, _ := keep(t, files, nil)
		_, err := source.Patch(other, "first", string(ch.Patch), bases.NewDraft(bases.Limits{}))
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "the patch was made from") {
			t.Errorf("over another %s: %v; want it refused", name, err)
		}
	}
}
