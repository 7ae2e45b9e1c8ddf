// Package tartest reads tars in tests: a workspace export, an archive.
// Only tests import it.
package tartest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"path"
	"testing"
)

// Files returns the regular files of a tar by their cleaned path
// ("./a/b" is "a/b"), and fails the test if the tar does not read.
func Files(tb testing.TB, content []byte) map[string]string {
	tb.Helper()
	files := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(content))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			tb.Fatalf("tartest: reading the tar: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			tb.Fatalf("tartest: reading %s: %v", h.Name, err)
		}
		files[path.Clean(h.Name)] = string(b)
	}
}
