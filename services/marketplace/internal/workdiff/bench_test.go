package workdiff_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/google/uuid"

	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/workdiff"
)

// benchContent is file i of the benchmark's base: 1-2 KB of text.
func benchContent(i int) []byte {
	var b bytes.Buffer
	for line := 0; b.Len() < 1024+i%1024; line++ {
		fmt.Fprintf(&b, "file %d line %d: %x\n", i, line, uint64(i)*0x9e3779b97f4a7c15^uint64(line)*0xbf58476d1ce4e5b9)
	}
	return b.Bytes()
}

// storedBase keeps a base of n files, file(i) at path(i), in a store in a
// temporary directory, and returns the store and the record to open it.
func storedBase(tb testing.TB, n int, path func(int) string, file func(int) []byte) (*bases.Store, uuid.UUID, bases.Record) {
	tb.Helper()
	d := bases.NewDraft(bases.Limits{})
	for i := range n {
		if err := d.AddFile(path(i), filemode.Regular, bytes.NewReader(file(i))); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := d.Commit("base", plumbing.ZeroHash, plumbing.ZeroHash); err != nil {
		tb.Fatal(err)
	}
	store, err := bases.NewStore(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	journey := uuid.New()
	rec, err := store.Keep(journey, d)
	if err != nil {
		tb.Fatal(err)
	}
	return store, journey, rec
}

// BenchmarkCompute times what workspace_diff does past the engine's export:
// opening a 5,000-file base from its store on disk and comparing it with a
// workspace tar (in memory, as the runtime exports it) in which 10 files
// changed.
func BenchmarkCompute(b *testing.B) {
	const files, changed = 5000, 10
	store, journey, rec := storedBase(b, files, benchPath, benchContent)

	// The workspace: every directory and file, the way the engine writes
	// them, 10 files with their second line rewritten.
	var ws bytes.Buffer
	tw := tar.NewWriter(&ws)
	for dir := range 100 {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("pkg%02d/", dir), Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			b.Fatal(err)
		}
		for i := dir; i < files; i += 100 {
			c := benchContent(i)
			if i%(files/changed) == 0 {
				c = bytes.Replace(c, []byte(" line 1:"), []byte(" line 1 changed:"), 1)
			}
			if err := tw.WriteHeader(&tar.Header{Name: benchPath(i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(c))}); err != nil {
				b.Fatal(err)
			}
			if _, err := tw.Write(c); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}

	b.SetBytes(int64(ws.Len()))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		base, err := store.Open(journey, rec)
		if err != nil {
			b.Fatal(err)
		}
		ch, err := workdiff.Compute(base, bytes.NewReader(ws.Bytes()), workdiff.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if s := ch.Summary; s.Modified != changed || s.FilesChanged != changed || s.LinesAdded != changed {
			b.Fatalf("summary %+v, want %d files with a line changed each", s, changed)
		}
	}
}

// benchPath is the path of file i: 50 files in each of 100 directories.
func benchPath(i int) string { return fmt.Sprintf("pkg%02d/file%04d.txt", i%100, i) }
