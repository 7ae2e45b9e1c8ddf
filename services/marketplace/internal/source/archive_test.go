package source_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
)

// archive encodes entries as a source archive.
func archive(t testing.TB, entries ...*tar.Header) *source.ArchiveSpec {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		body := strings.Repeat("x", int(h.Size))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.Close()
	_ = gz.Close()
	return spec(buf.Bytes())
}

// paxBomb is an archive of count PAX global headers of almost 1 MiB each
// (the most the tar reader takes), which the reader inflates and parses
// and the draft never counts: a few kilobytes compressed.
func paxBomb(t testing.TB, count int) *source.ArchiveSpec {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for i := range count {
		hdr := &tar.Header{Name: fmt.Sprintf("g%d", i), Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": strings.Repeat("0", 900<<10)}}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
	}
	_ = tw.Close()
	_ = gz.Close()
	return spec(buf.Bytes())
}

func spec(raw []byte) *source.ArchiveSpec {
	sum := sha256.Sum256(raw)
	return &source.ArchiveSpec{TarGzBase64: base64.StdEncoding.EncodeToString(raw), SHA256: hex.EncodeToString(sum[:])}
}

func TestArchive(t *testing.T) {
	t.Parallel()
	file := func(name string, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: size, Mode: 0o644}
	}
	for _, tt := range []struct {
		name    string
		spec    *source.ArchiveSpec
		limits  bases.Limits
		files   int
		wantErr string
	}{
		{"files, a directory, an executable, a link inside", archive(t, &tar.Header{Name: "./src/", Typeflag: tar.TypeDir, Mode: 0o755}, file("./src/a.go", 3),
			&tar.Header{Name: "run.sh", Typeflag: tar.TypeReg, Mode: 0o755}, &tar.Header{Name: "src/l", Typeflag: tar.TypeSymlink, Linkname: "a.go"},
			&tar.Header{Name: "src/h", Typeflag: tar.TypeLink, Linkname: "./src/a.go"}), bases.Limits{}, 4, ""},
		{"link climbing to the root is fine", archive(t, file("a", 1), &tar.Header{Name: "d/e/l", Typeflag: tar.TypeSymlink, Linkname: "../../a"}), bases.Limits{}, 2, ""},
		{"link climbing out", archive(t, &tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}), bases.Limits{}, 0, `points to "../../x", outside the workspace`},
		{"too many files", archive(t, file("a", 1), file("b", 1), file("c", 1)), bases.Limits{MaxFiles: 2}, 0, "more than 2 files"},
		{"too many bytes", archive(t, file("a", 60), file("b", 60)), bases.Limits{MaxBytes: 100}, 0, "pass the limit of 100 bytes"},
		{"the same path twice", archive(t, file("a", 1), file("./a", 1)), bases.Limits{}, 0, `"a" appears twice`},
		{"a file and a directory", archive(t, file("a", 1), file("a/b", 1)), bases.Limits{}, 0, `"a" is both a file and a directory`},
		{"a directory and a file", archive(t, file("a/b", 1), file("a", 1)), bases.Limits{}, 0, `"a" is both a file and a directory`},
		{"a link through a link", archive(t, &tar.Header{Name: "x/up", Typeflag: tar.TypeSymlink, Linkname: ".."}, &tar.Header{Name: "y", Typeflag: tar.TypeSymlink, Linkname: "x/up/.."}), bases.Limits{}, 0, `"y" points through the symbolic link "x/up"`},
		{"a link target longer than a path may be", archive(t, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: strings.Repeat("a/", 2500)}), bases.Limits{}, 0, "a target of 5000 bytes; at most 4095"},
		{"a link to a link", archive(t, file("a", 1), &tar.Header{Name: "b", Typeflag: tar.TypeSymlink, Linkname: "a"}, &tar.Header{Name: "c", Typeflag: tar.TypeSymlink, Linkname: "b"}), bases.Limits{}, 3, ""},
		{".meshwork at the root", archive(t, file(".meshwork/home/x", 1)), bases.Limits{}, 0, ".meshwork is reserved"},
		{".GIT in any case", archive(t, file("sub/.GIT/config", 1)), bases.Limits{}, 0, ".git directories are not taken"},
		{".git as NTFS reads it", archive(t, file("sub/.git. /config", 1)), bases.Limits{}, 0, ".git directories are not taken"},
		{"backslash", archive(t, file(`a\..\b`, 1)), bases.Limits{}, 0, "backslash"},
		{"global headers inflate past the bound", paxBomb(t, 4), bases.Limits{MaxFiles: 10, MaxBytes: 1 << 20}, 0, "the archive inflates past 2127872 bytes"},
		{"global headers within it", paxBomb(t, 2), bases.Limits{MaxFiles: 10, MaxBytes: 1 << 20}, 0, ""},
		{"fifo", archive(t, &tar.Header{Name: "p", Typeflag: tar.TypeFifo}), bases.Limits{}, 0, "device or pipe"},
		{"not gzip", spec([]byte("plain text, not an archive")), bases.Limits{}, 0, "not a readable tar.gz"},
		{"bad base64", &source.ArchiveSpec{TarGzBase64: "!!!!", SHA256: strings.Repeat("a", 64)}, bases.Limits{}, 0, "not valid base64"},
		{"bad checksum form", &source.ArchiveSpec{TarGzBase64: "AAAA", SHA256: "xyz"}, bases.Limits{}, 0, "64 hex digits"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := bases.NewDraft(tt.limits)
			rec, err := (&source.Policy{}).Archive(tt.spec, d)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
				}
				if e := (*source.Error)(nil); !errors.Is(err, bases.ErrRefused) && (!errors.As(err, &e) || e.Code != source.CodeInvalid) {
					t.Errorf("%v is neither refused nor a client's error (invalid_argument)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rec.Files != tt.files || len(d.Files()) != tt.files {
				t.Errorf("%d files (record %d), want %d: %v", len(d.Files()), rec.Files, tt.files, d.Files())
			}
		})
	}
}

// FuzzArchive: any bytes as an archive are refused with an error or
// unpacked into a draft whose every path passes the checks; never a panic.
func FuzzArchive(f *testing.F) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	_ = tw.WriteHeader(&tar.Header{Name: "a/b.txt", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.WriteHeader(&tar.Header{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "b.txt"})
	_ = tw.Close()
	_ = gz.Close()
	f.Add(buf.Bytes())
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(func(t *testing.T, raw []byte) {
		d := bases.NewDraft(bases.Limits{MaxFiles: 100, MaxBytes: 1 << 20})
		if _, err := (&source.Policy{MaxArchiveBytes: 1 << 20}).Archive(spec(raw), d); err != nil {
			return
		}
		for p := range d.Files() {
			if _, err := bases.CheckPath(p); err != nil {
				t.Fatalf("accepted a path CheckPath refuses: %v", err)
			}
		}
	})
}
