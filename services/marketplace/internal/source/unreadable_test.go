package source_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
)

// The marketplace runs as a user of its own: a repository that user may
// not read, whole or in part, is said to be unreadable (permission_denied,
// with the chmod that fixes it), not missing nor without the ref asked for.
// The tests run as root, whom no mode shuts out, so each repository is read
// by this test binary run again as nobody.
func TestAnUnreadableRepositoryIsSaidToBe(t *testing.T) {
	if dir := os.Getenv("MESHWORK_TEST_READ_AS_NOBODY"); dir != "" {
		pol := &source.Policy{Roots: []string{filepath.Dir(dir)}}
		err := pol.CheckRoots()
		if err == nil {
			_, err = pol.Git(context.Background(), "alice", &source.GitSpec{URL: dir}, bases.NewDraft(bases.Limits{MaxFiles: 100, MaxBytes: 1 << 20}))
		}
		result := "ok"
		if e, ok := source.AsError(err); ok {
			result = string(e.Code) + " " + e.Message
		} else if err != nil {
			result = "error " + err.Error()
		}
		fmt.Printf("RESULT %s\n", result)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("reading as another user needs root")
	}
	t.Parallel()
	bin := copyExecutable(t)
	root := t.TempDir()
	openUp(t, root)
	for _, tc := range []struct {
		name   string
		shut   func(repo string) // what it makes unreadable
		wanted string            // the code, then words of the message
	}{
		{"readable", func(string) {}, "ok"},
		{"the whole repository", func(repo string) { chmod(t, "go-rwx", repo) }, "permission_denied"},
		{"HEAD and config", func(repo string) {
			chmod(t, "go-r", filepath.Join(repo, ".git/HEAD"), filepath.Join(repo, ".git/config"))
		}, "permission_denied"},
		{"the loose objects", func(repo string) {
			objects, _ := filepath.Glob(filepath.Join(repo, ".git/objects/??/*"))
			chmod(t, "go-r", objects...)
		}, "permission_denied"},
		{"the packs", func(repo string) {
			gittest.Run(t, repo, "gc", "-q")
			packs, _ := filepath.Glob(filepath.Join(repo, ".git/objects/pack/*"))
			chmod(t, "go-r", packs...)
		}, "permission_denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			repo := gittest.Repo(t, filepath.Join(root, strings.ReplaceAll(tc.name, " ", "-")), map[string]string{"a.txt": "a\n", "dir/b.txt": "b\n"})
			chmod(t, "a+rX", repo)
			tc.shut(repo)
			cmd := exec.Command(bin, "-test.run=^TestAnUnreadableRepositoryIsSaidToBe$", "-test.count=1")
			cmd.Env = append(os.Environ(), "MESHWORK_TEST_READ_AS_NOBODY="+repo)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			_, result, found := strings.Cut(string(out), "RESULT ")
			result, _, _ = strings.Cut(result, "\n")
			if err != nil || !found || !strings.HasPrefix(result, tc.wanted) || (tc.wanted != "ok" && !strings.Contains(result, "chmod -R a+rX")) {
				t.Errorf("reading the repository as nobody: %q (%v), want %s\n%s", result, err, tc.wanted, out)
			}
		})
	}
}

// copyExecutable copies this test binary where nobody may run it.
func copyExecutable(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	openUp(t, dir)
	bin := filepath.Join(dir, "source.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// openUp lets every user into dir and the test's temporary directory above it.
func openUp(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func chmod(t *testing.T, mode string, paths ...string) {
	t.Helper()
	if len(paths) == 0 {
		t.Fatal("chmod: nothing to change")
	}
	if out, err := exec.Command("chmod", append([]string{"-R", mode}, paths...)...).CombinedOutput(); err != nil {
		t.Fatalf("chmod %s: %v\n%s", mode, err, out)
	}
}
