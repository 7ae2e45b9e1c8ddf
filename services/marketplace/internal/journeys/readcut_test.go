package journeys_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// cutRuntime cuts its first workspace read short, as the docker runtime
// finds a read that a stop removing the worker ended early: it passes on
// the archive's first entry alone, as a whole archive (the engine's copy
// ends at a file boundary, and nothing in the stream shows the rest
// missing), and says the read was cut (workerruntime.ErrReadCut). Later
// reads pass.
type cutRuntime struct {
	workerruntime.Runtime
	reads atomic.Int32
}

func (c *cutRuntime) ExportWorkspace(ctx context.Context, h workerruntime.Handle, w io.Writer) error {
	if c.reads.Add(1) > 1 {
		return c.Runtime.ExportWorkspace(ctx, h, w)
	}
	var whole bytes.Buffer
	if err := c.Runtime.ExportWorkspace(ctx, h, &whole); err != nil {
		return err
	}
	tr, tw := tar.NewReader(&whole), tar.NewWriter(w)
	hdr, err := tr.Next()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, tr); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	// What was read reaches the reader before the error does, as when the
	// engine's copy had ended: the change computed from it has no error.
	if f, ok := w.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			return err
		}
	}
	return workerruntime.ErrReadCut
}

// A workspace read that the runtime says was cut is read again, and the
// change is the whole workspace's: not the few files the cut read held,
// nor an error.
func TestACutReadIsReadAgain(t *testing.T) {
	t.Parallel()
	cut := &cutRuntime{}
	b := setupWith(t, 0, 0, func(rt workerruntime.Runtime) workerruntime.Runtime { cut.Runtime = rt; return cut })
	ctx := context.Background()
	_, err := b.mgr.Spawn(ctx, "alice", journeys.SpawnRequest{
		WorkerID: "filesystem_research_v1", JourneyID: "cut", IsolationLevel: "process",
		Source: &source.Spec{Archive: archiveOf(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})},
	})
	if err != nil {
		t.Fatal(err)
	}
	// What an agent would have written.
	var uid string
	if err := b.pool.QueryRow(ctx, `SELECT uid::text FROM journeys WHERE id = 'cut'`).Scan(&uid); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.stateDir, "workspaces", uid, "new.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	diff, err := b.mgr.Diff(ctx, "alice", journeys.DiffRequest{JourneyID: "cut"})
	if err != nil {
		t.Fatalf("a diff whose first read was cut: %v", err)
	}
	if got := cut.reads.Load(); got != 2 {
		t.Errorf("the workspace was read %d times, want 2 (the cut read, then once more)", got)
	}
	if len(diff.Summary.Files) != 1 || diff.Summary.Files[0].Path != "new.txt" || !strings.Contains(diff.Patch, "+new") {
		t.Errorf("the change: %+v\n%s\nwant new.txt added and nothing else", diff.Summary.Files, diff.Patch)
	}
}

// archiveOf is an archive source of files.
func archiveOf(t *testing.T, files map[string]string) *source.ArchiveSpec {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return &source.ArchiveSpec{TarGzBase64: base64.StdEncoding.EncodeToString(buf.Bytes()), SHA256: hex.EncodeToString(sum[:])}
}
