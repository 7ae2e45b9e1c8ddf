package source_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
)

// gitServer serves the repositories under root over https with the real
// git's smart HTTP backend, behind basic auth with user and password. It
// counts the requests that came without the right credentials.
func gitServer(t testing.TB, root, user, password string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	backend, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v", err)
	}
	h := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(backend)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	var refused atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &refused
}

// An https source from an allowed host, fetched with the host's configured
// credentials and a private CA: the branch, a tag and a commit id resolve;
// wrong credentials and an unknown repository are refused without the
// secret in the message.
func TestGitOverHTTPS(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := gittest.Repo(t, filepath.Join(root, "src"), map[string]string{"main.go": "package main\n", "docs/a.md": "# a\n"})
	first := gittest.Head(t, repo)
	gittest.Run(t, repo, "tag", "-a", "v1", "-m", "v1")
	if err := os.WriteFile(filepath.Join(repo, "b.txt"), []byte("b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, repo, "add", "b.txt")
	gittest.Run(t, repo, "commit", "-q", "-m", "second")
	second := gittest.Head(t, repo)
	gittest.Run(t, root, "clone", "-q", "--bare", repo, filepath.Join(root, "app.git"))

	const secret = "s3cret-token-value"
	srv, refused := gitServer(t, root, "bot", secret)
	u, _ := url.Parse(srv.URL)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	host := source.NormalizeHost(u.Host)
	pol := &source.Policy{Hosts: []string{host}, CABundle: ca, Credentials: map[string][]source.Credential{host: {{Username: "bot", Password: secret}}}}
	repoURL := srv.URL + "/app.git"

	for _, tt := range []struct {
		ref, want string
		files     int
	}{
		{"", second, 3}, {"main", second, 3}, {"v1", first, 2}, {first, first, 2},
	} {
		d := bases.NewDraft(bases.Limits{})
		rec, err := pol.Git(context.Background(), "alice", &source.GitSpec{URL: repoURL, Ref: tt.ref}, d)
		if err != nil {
			t.Fatalf("ref %q: %v", tt.ref, err)
		}
		if rec.Commit != tt.want || rec.Files != tt.files {
			t.Errorf("ref %q: commit %s with %d files, want %s with %d", tt.ref, rec.Commit, rec.Files, tt.want, tt.files)
		}
	}
	if refused.Load() != 0 {
		t.Errorf("%d requests came without the configured credentials", refused.Load())
	}

	wrong := *pol
	wrong.Credentials = map[string][]source.Credential{host: {{Username: "bot", Password: "not-" + secret}}}
	_, err := wrong.Git(context.Background(), "alice", &source.GitSpec{URL: repoURL}, bases.NewDraft(bases.Limits{}))
	if e, ok := source.AsError(err); !ok || e.Code != source.CodeDenied || strings.Contains(err.Error(), secret) {
		t.Errorf("wrong credentials: %v", err)
	}
	_, err = pol.Git(context.Background(), "alice", &source.GitSpec{URL: srv.URL + "/missing.git"}, bases.NewDraft(bases.Limits{}))
	if e, ok := source.AsError(err); !ok || strings.Contains(err.Error(), secret) || e.Code == source.CodeInvalid {
		t.Errorf("missing repository: %v", err)
	}
	_, err = pol.Git(context.Background(), "alice", &source.GitSpec{URL: repoURL, Ref: "no-such-branch"}, bases.NewDraft(bases.Limits{}))
	if e, ok := source.AsError(err); !ok || e.Code != source.CodeNotFound {
		t.Errorf("unknown ref: %v", err)
	}
	// A credential that names its callers serves them alone; a caller it
	// does not name fetches with the host's credential for every caller, or
	// with none.
	for _, tt := range []struct {
		name  string
		creds []source.Credential
		// a caller's fetch: "" when it works, else what its refusal says
		want map[string]string
	}{
		{"alice's alone", []source.Credential{{Username: "bot", Password: secret, Callers: []string{"alice"}}}, map[string]string{
			"alice": "", "bob": "none are configured for this caller",
		}},
		{"alice's before everyone's", []source.Credential{
			{Username: "bot", Password: secret},
			{Username: "bot", Password: "not-" + secret, Callers: []string{"carol", "alice"}},
		}, map[string]string{"alice": "refused the marketplace's credentials", "bob": ""}},
	} {
		scoped := *pol
		scoped.Credentials = map[string][]source.Credential{host: tt.creds}
		for caller, want := range tt.want {
			_, err := scoped.Git(context.Background(), caller, &source.GitSpec{URL: repoURL}, bases.NewDraft(bases.Limits{}))
			e, isErr := source.AsError(err)
			if want == "" && err != nil || want != "" && (!isErr || e.Code != source.CodeDenied || !strings.Contains(err.Error(), want)) {
				t.Errorf("%s: %s's fetch: %v, want %q", tt.name, caller, err, want)
			}
		}
	}
	// A redirect is not followed: the allowed host cannot hand the fetch,
	// and its credentials, to another.
	moved := httptest.NewTLSServer(http.RedirectHandler(srv.URL+"/app.git/info/refs?service=git-upload-pack", http.StatusFound))
	t.Cleanup(moved.Close)
	mu, _ := url.Parse(moved.URL)
	movedHost := source.NormalizeHost(mu.Host)
	redirected := *pol
	redirected.Hosts = append([]string{movedHost}, pol.Hosts...)
	redirected.CABundle = append(append([]byte{}, ca...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: moved.Certificate().Raw})...)
	_, err = redirected.Git(context.Background(), "alice", &source.GitSpec{URL: moved.URL + "/app.git"}, bases.NewDraft(bases.Limits{}))
	if e, ok := source.AsError(err); !ok || e.Code != source.CodeDenied || !strings.Contains(err.Error(), "redirected") {
		t.Errorf("a redirect: %v", err)
	}
	// Tokens in the URL are refused: they belong in the credentials.
	if _, err := pol.Git(context.Background(), "alice", &source.GitSpec{URL: repoURL + "?access_token=x"}, bases.NewDraft(bases.Limits{})); err == nil || !strings.Contains(err.Error(), "query") {
		t.Errorf("a query in the URL: %v", err)
	}
	// The host's certificate is trusted only through the configured CA.
	noCA := *pol
	noCA.CABundle = nil
	if _, err := noCA.Git(context.Background(), "alice", &source.GitSpec{URL: repoURL}, bases.NewDraft(bases.Limits{})); err == nil {
		t.Error("fetched from a host whose certificate no configured CA signed")
	}
}

// bomb is 128 MiB of zeros: a few hundred kilobytes in a repository.
const bomb = 128 << 20

// bombRepo makes a repository in root/src whose one large file is bomb
// bytes of zeros, and a bare clone of it, root/bomb.git.
func bombRepo(t *testing.T, root string) string {
	t.Helper()
	repo := gittest.Repo(t, filepath.Join(root, "src"), map[string]string{"README.md": "# bomb\n"})
	f, err := os.Create(filepath.Join(repo, "zeros.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(bomb), f.Close()); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, repo, "add", "zeros.bin")
	gittest.Run(t, repo, "commit", "-q", "-m", "zeros")
	gittest.Run(t, root, "clone", "-q", "--bare", repo, filepath.Join(root, "bomb.git"))
	return repo
}

// allocated is how many bytes f allocates on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A repository with a file of 128 MiB of zeros is refused from the sizes
// its objects declare, before the file is inflated: over https (from the
// fetched packfile) and from a local directory (from the object's header),
// each allocating far less than the file's size. Not parallel, so that the
// allocations counted are the source's.
func TestACompressionBombIsRefusedBeforeItInflates(t *testing.T) {
	root := t.TempDir()
	bombRepo(t, root)

	srv, _ := gitServer(t, root, "bot", "secret")
	u, _ := url.Parse(srv.URL)
	host := source.NormalizeHost(u.Host)
	pol := &source.Policy{
		Hosts: []string{host}, CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
		Credentials: map[string][]source.Credential{host: {{Username: "bot", Password: "secret"}}},
		Limits:      bases.Limits{MaxBytes: 16 << 20},
	}
	scratch := t.TempDir()
	store, err := bases.NewStore(scratch)
	if err != nil {
		t.Fatal(err)
	}
	alloc := allocated(func() {
		_, err = pol.Git(context.Background(), "alice", &source.GitSpec{URL: srv.URL + "/bomb.git"}, store.NewDraft(pol.Limits))
	})
	if e, ok := source.AsError(err); !ok || e.Code != source.CodeInvalid || !strings.Contains(err.Error(), "is 134217728 bytes; the file limit is 16777216") {
		t.Fatalf("fetching the bomb: %v", err)
	}
	if alloc > bomb/4 {
		t.Errorf("the refused fetch allocated %d MiB; the file is %d MiB", alloc>>20, bomb>>20)
	}
	local := &source.Policy{Roots: []string{root}, Limits: pol.Limits}
	if err := local.CheckRoots(); err != nil {
		t.Fatal(err)
	}
	alloc = allocated(func() {
		_, err = local.Git(context.Background(), "alice", &source.GitSpec{URL: filepath.Join(root, "bomb.git")}, store.NewDraft(pol.Limits))
	})
	if !errors.Is(err, bases.ErrRefused) || !strings.Contains(err.Error(), "pass the limit of 16777216 bytes") {
		t.Fatalf("reading the bomb from a local directory: %v", err)
	}
	if alloc > bomb/4 {
		t.Errorf("the refused local source allocated %d MiB; the file is %d MiB", alloc>>20, bomb>>20)
	}
	// The fetched packfile waited in the store's directory, and is gone.
	if left, _ := os.ReadDir(scratch); len(left) != 0 {
		t.Errorf("the fetch left %v in the store's directory", left)
	}
}

// A local repository's loose object whose header declares 10 bytes and
// whose data inflates to 64 MiB is read no further than its header says,
// and refused. Not parallel, so that the allocations counted are the
// source's.
func TestALooseObjectThatLiesIsReadNoFurther(t *testing.T) {
	root := t.TempDir()
	repo := gittest.Repo(t, filepath.Join(root, "src"), map[string]string{"a.txt": "0123456789"})
	blob := strings.TrimSpace(gittest.Run(t, repo, "rev-parse", "HEAD:a.txt"))
	var lie bytes.Buffer
	zw := zlib.NewWriter(&lie)
	_, _ = zw.Write([]byte("blob 10\x00"))
	_, _ = zw.Write(make([]byte, 64<<20))
	_ = zw.Close()
	loose := filepath.Join(repo, ".git", "objects", blob[:2], blob[2:])
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(loose, lie.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	pol := &source.Policy{Roots: []string{root}}
	if err := pol.CheckRoots(); err != nil {
		t.Fatal(err)
	}
	var err error
	alloc := allocated(func() {
		_, err = pol.Git(context.Background(), "alice", &source.GitSpec{URL: repo}, bases.NewDraft(bases.Limits{}))
	})
	if !errors.Is(err, bases.ErrRefused) || !strings.Contains(err.Error(), "is corrupt") {
		t.Fatalf("a loose object that inflates past its header: %v", err)
	}
	if alloc > 16<<20 {
		t.Errorf("the refused source allocated %d MiB", alloc>>20)
	}
}

// A local repository's files are counted as they are copied, against the
// draft's limits on files and on their bytes together, and a repository
// within both limits is copied. CopyCommit counts a content once however
// many paths hold it (the draft's tree counts the paths afterwards).
func TestALocalRepositoryWithinItsLimits(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := gittest.Repo(t, filepath.Join(root, "src"), map[string]string{
		"a.txt": strings.Repeat("a", 60), "b.txt": strings.Repeat("b", 60), "dir/copy-of-a.txt": strings.Repeat("a", 60),
	})
	pol := &source.Policy{Roots: []string{root}}
	if err := pol.CheckRoots(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		limits bases.Limits
		want   string // in the refusal; "" for a copy
	}{
		{"within both", bases.Limits{MaxFiles: 3, MaxBytes: 180}, ""},
		{"too many files", bases.Limits{MaxFiles: 1, MaxBytes: 1 << 20}, "the repository has more than 1 files"},
		{"too many bytes", bases.Limits{MaxFiles: 10, MaxBytes: 119}, "the repository's files pass the limit of 119 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := pol.Git(context.Background(), "alice", &source.GitSpec{URL: repo}, bases.NewDraft(tt.limits))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("copying the repository: %v", err)
			case tt.want != "" && (!errors.Is(err, bases.ErrRefused) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("copying the repository: %v, want a refusal saying %q", err, tt.want)
			}
		})
	}

	// Two contents of 60 bytes each, in three paths: within two files and
	// 120 bytes, and one byte short of that is refused.
	st, err := git.PlainOpen(repo)
	if err != nil {
		t.Fatal(err)
	}
	head := plumbing.NewHash(gittest.Head(t, repo))
	if err := source.CopyCommit(st.Storer, bases.NewDraft(bases.Limits{MaxFiles: 2, MaxBytes: 120}), head, plumbing.ZeroHash); err != nil {
		t.Errorf("CopyCommit within two contents and 120 bytes: %v", err)
	}
	if err := source.CopyCommit(st.Storer, bases.NewDraft(bases.Limits{MaxFiles: 2, MaxBytes: 119}), head, plumbing.ZeroHash); !errors.Is(err, bases.ErrRefused) {
		t.Errorf("CopyCommit within 119 bytes: %v, want a refusal", err)
	}
}
