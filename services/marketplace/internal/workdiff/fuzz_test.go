package workdiff_test

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/workdiff"
)

// FuzzCompute: whatever the workspace export holds (it is the worker's
// doing), Compute returns an error or a change whose every file is a path
// the gate can check; never a panic.
func FuzzCompute(f *testing.F) {
	seedFiles := []string{"a.txt", "dir/b.go"}
	contents := []string{"a\nb\n", "package b\n"}
	store, j, rec := storedBase(f, len(seedFiles), func(i int) string { return seedFiles[i] }, func(i int) []byte { return []byte(contents[i]) })
	base, err := store.Open(j, rec)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = base.Close() })

	var seed bytes.Buffer
	tw := tar.NewWriter(&seed)
	_ = tw.WriteHeader(&tar.Header{Name: "./a.txt", Typeflag: tar.TypeReg, Size: 4, Mode: 0o755})
	_, _ = tw.Write([]byte("a\nc\n"))
	_ = tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../x"})
	_ = tw.WriteHeader(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "./a.txt"})
	_ = tw.Close()
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, raw []byte) {
		ch, err := workdiff.Compute(base, bytes.NewReader(raw), workdiff.Options{MaxChangedBytes: 1 << 20})
		if err != nil {
			return
		}
		for _, file := range ch.Summary.Files {
			if file.Path == "" || strings.HasPrefix(file.Path, "/") || file.Path == ".." || strings.HasPrefix(file.Path, "../") || workdiff.Private(file.Path) {
				t.Fatalf("a change names %q", file.Path)
			}
		}
		if int64(len(ch.Patch)) != ch.Summary.DiffBytes {
			t.Fatalf("diff_bytes %d for a patch of %d", ch.Summary.DiffBytes, len(ch.Patch))
		}
	})
}
