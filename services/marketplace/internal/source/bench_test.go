package source_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
)

// BenchmarkFetchOverHTTPS fetches one commit of a 5,000-file repository
// (about 6.5 MB) from the real git's smart HTTP backend over https, as a
// spawn's git source does (the pack checked on disk, then parsed into the
// draft, and the draft's files checked), against the real git fetching the
// same commit into an empty bare repository. The two alternate, each first
// in every other round, so that the host's noise falls on both.
func BenchmarkFetchOverHTTPS(b *testing.B) {
	const files = 5000
	root := b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	tree := make(map[string]string, files)
	for i := range files {
		words := make([]string, 150+i%150)
		for k := range words {
			words[k] = fmt.Sprintf("w%d", rng.IntN(5000))
		}
		tree[fmt.Sprintf("pkg%02d/file%04d.txt", i%50, i)] = strings.Join(words, " ") + "\n"
	}
	gittest.Repo(b, filepath.Join(root, "src"), tree)
	gittest.Run(b, root, "clone", "-q", "--bare", filepath.Join(root, "src"), filepath.Join(root, "app.git"))
	srv, _ := gitServer(b, root, "bot", "secret")
	u, _ := url.Parse(srv.URL)
	host := source.NormalizeHost(u.Host)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	caFile := filepath.Join(root, "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		b.Fatal(err)
	}
	pol := &source.Policy{Hosts: []string{host}, CABundle: ca, Credentials: map[string][]source.Credential{host: {{Username: "bot", Password: "secret"}}}}
	store, err := bases.NewStore(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	marketplace := func() time.Duration {
		start := time.Now()
		rec, err := pol.Git(context.Background(), "alice", &source.GitSpec{URL: srv.URL + "/app.git"}, store.NewDraft(bases.Limits{}))
		d := time.Since(start)
		if err != nil || rec.Files != files {
			b.Fatalf("fetch: %d files, %v", rec.Files, err)
		}
		return d
	}
	authURL := strings.Replace(srv.URL, "https://", "https://bot:secret@", 1) + "/app.git"
	gitFetch := func() time.Duration {
		dir := b.TempDir()
		gittest.Run(b, dir, "init", "-q", "--bare")
		start := time.Now()
		cmd := exec.Command("git", "fetch", "-q", "--depth", "1", authURL, "HEAD")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_SSL_CAINFO="+caFile)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git fetch: %v: %s", err, out)
		}
		return time.Since(start)
	}
	var ours, theirs []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			ours, theirs = append(ours, marketplace()), append(theirs, gitFetch())
		} else {
			theirs, ours = append(theirs, gitFetch()), append(ours, marketplace())
		}
	}
	p50 := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(ours), "p50-ms")
	b.ReportMetric(p50(theirs), "git-fetch-p50-ms")
	b.ReportMetric(p50(ours)/p50(theirs), "ratio")
}
