package mcpserver_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/gittest"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
)

// userRepo makes a user's repository under root: a Go module with a bug
// and a CI workflow.
func userRepo(t *testing.T, root string) string {
	t.Helper()
	return gittest.Repo(t, filepath.Join(root, "project"), map[string]string{
		"go.mod":                   "module example.com/calc\n\ngo 1.19\n",
		"calc.go":                  "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a - b }\n",
		"README.md":                "# calc\n",
		".github/workflows/ci.yml": "on: push\n",
	})
}

// The loop a user comes for: their repository in, work under the gate, a
// patch out that the real git applies; a bundle fetches; a change to a
// denied path is refused by the result gate and audited; the patch seeds
// the next journey.
func TestCodingLoop(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := userRepo(t, root)
	b := &bundle{sources: source.Policy{Roots: []string{root}}}
	if err := b.sources.CheckRoots(); err != nil {
		t.Fatal(err)
	}
	b = setupWith(t, b)
	cs := b.client(t, aliceToken)

	sp := must(t, cs, "spawn_worker", map[string]any{
		"worker_id": "filesystem_write_v1", "journey_id": "fix",
		"source": map[string]any{"git": map[string]any{"url": "file://" + repo}},
	})
	head := gittest.Head(t, repo)
	src, _ := sp["source"].(map[string]any)
	if src["commit"] != head || src["kind"] != "git" || src["files"] != float64(4) {
		t.Fatalf("spawn source %v, want commit %s and 4 files", sp["source"], head)
	}
	r := must(t, cs, "execute_in_worker", execArgs("fix", map[string]any{"type": "read", "target": "calc.go"}))
	if !strings.Contains(mustJSON(t, r["output"]), "a - b") {
		t.Fatalf("the seeded workspace does not hold the repository: %v", r)
	}

	// Nothing changed yet: an empty diff.
	d := must(t, cs, "workspace_diff", map[string]any{"journey_id": "fix"})
	if d["patch"] != "" || d["summary"].(map[string]any)["files_changed"] != float64(0) {
		t.Fatalf("diff before any change: %v", d)
	}

	must(t, cs, "execute_in_worker", execArgs("fix", map[string]any{
		"type": "write", "target": "calc.go",
		"content": "package calc\n\n// Add adds.\nfunc Add(a, b int) int { return a + b }\n",
	}))
	must(t, cs, "execute_in_worker", execArgs("fix", map[string]any{
		"type": "write", "target": "calc_test.go",
		"content": "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 2) != 4 {\n\t\tt.Fatal(Add(2, 2))\n\t}\n}\n",
	}))
	must(t, cs, "execute_in_worker", execArgs("fix", map[string]any{"type": "delete", "target": "README.md"}))

	d = must(t, cs, "workspace_diff", map[string]any{"journey_id": "fix"})
	sum := d["summary"].(map[string]any)
	if sum["added"] != float64(1) || sum["modified"] != float64(1) || sum["deleted"] != float64(1) || sum["files_changed"] != float64(3) {
		t.Fatalf("summary %v", sum)
	}
	patch := d["patch"].(string)
	clone := filepath.Join(root, "clone")
	gittest.Run(t, root, "clone", "-q", repo, clone)
	pf := filepath.Join(root, "fix.patch")
	if err := os.WriteFile(pf, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Run(t, clone, "apply", "--check", pf)
	gittest.Run(t, clone, "apply", pf)
	if got, _ := os.ReadFile(filepath.Join(clone, "calc.go")); !strings.Contains(string(got), "a + b") {
		t.Errorf("calc.go after git apply: %s", got)
	}

	// A path filter narrows the diff.
	only := must(t, cs, "workspace_diff", map[string]any{"journey_id": "fix", "paths": []string{"calc.go"}})
	if only["summary"].(map[string]any)["files_changed"] != float64(1) {
		t.Errorf("diff of calc.go only: %v", only["summary"])
	}

	// The bundle fetches into a clone that has the source commit.
	ex := must(t, cs, "export_workspace", map[string]any{"journey_id": "fix", "format": "bundle"})
	raw, err := base64.StdEncoding.DecodeString(ex["content_base64"].(string))
	if err != nil {
		t.Fatal(err)
	}
	bf := filepath.Join(root, "fix.bundle")
	if err := os.WriteFile(bf, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	clone2 := filepath.Join(root, "clone2")
	gittest.Run(t, root, "clone", "-q", repo, clone2)
	gittest.Run(t, clone2, "fetch", "-q", bf, "refs/heads/meshwork:refs/heads/meshwork")
	if got := strings.TrimSpace(gittest.Run(t, clone2, "rev-parse", "meshwork^")); got != head {
		t.Errorf("bundle commit's parent is %s, want %s", got, head)
	}
	if got := strings.TrimSpace(gittest.Run(t, clone2, "rev-parse", "meshwork")); got != ex["commit"] {
		t.Errorf("bundle holds %s, export said %v", got, ex["commit"])
	}

	// The same workspace exports as the same bytes, a bundle as the same
	// commit (dated when the journey began): pulling it again changes
	// nothing.
	again := must(t, cs, "export_workspace", map[string]any{"journey_id": "fix", "format": "bundle"})
	if again["commit"] != ex["commit"] || again["sha256"] != ex["sha256"] {
		t.Errorf("the same workspace exported twice: commit %v then %v, sha256 %v then %v", ex["commit"], again["commit"], ex["sha256"], again["sha256"])
	}
	tar1 := must(t, cs, "export_workspace", map[string]any{"journey_id": "fix", "format": "tar"})
	tar2 := must(t, cs, "export_workspace", map[string]any{"journey_id": "fix", "format": "tar"})
	if tar1["sha256"] != tar2["sha256"] {
		t.Errorf("the same workspace tarred twice: sha256 %v then %v", tar1["sha256"], tar2["sha256"])
	}

	// The next journey starts from this one's base plus its patch.
	must(t, cs, "spawn_worker", map[string]any{
		"worker_id": "filesystem_research_v1", "journey_id": "review",
		"source": map[string]any{"journey": "fix", "patch": patch},
	})
	r = must(t, cs, "execute_in_worker", execArgs("review", map[string]any{"type": "read", "target": "calc_test.go"}))
	if !strings.Contains(mustJSON(t, r["output"]), "TestAdd") {
		t.Errorf("the patched journey lacks the new file: %v", r)
	}
	if d2 := must(t, cs, "workspace_diff", map[string]any{"journey_id": "review"}); d2["patch"] != "" {
		t.Errorf("a journey seeded from a patch starts with no change of its own: %v", d2)
	}

	// A shell worker seeded from the repository works in a clean checkout
	// of the source commit, with git; what it commits there changes nothing
	// in what the diff reports.
	must(t, cs, "spawn_worker", map[string]any{
		"worker_id": "shell_v1", "journey_id": "git",
		"source": map[string]any{"git": map[string]any{"url": repo}},
	})
	st0 := must(t, cs, "execute_in_worker", execArgs("git", map[string]any{"type": "exec", "command": []string{"git", "status", "--porcelain"}}))
	if out := st0["output"].(map[string]any); out["exit_code"] != float64(0) || out["stdout"] != "" {
		t.Errorf("git status in a seeded workspace: %v", out)
	}
	lg := must(t, cs, "execute_in_worker", execArgs("git", map[string]any{"type": "exec", "command": []string{"git", "diff", "--stat", head}}))
	if out := lg["output"].(map[string]any); out["exit_code"] != float64(0) {
		t.Errorf("git diff against the source commit: %v", out)
	}
	must(t, cs, "execute_in_worker", execArgs("git", map[string]any{"type": "write", "target": "NEW.md", "content": "new\n"}))
	if d := must(t, cs, "workspace_diff", map[string]any{"journey_id": "git"}); d["summary"].(map[string]any)["added"] != float64(1) {
		t.Errorf("diff of a seeded shell workspace: %v", d["summary"])
	}

	// A change to a denied path is refused by the result gate, with the
	// exact violation, audited; nothing is returned and the workspace stays.
	must(t, cs, "execute_in_worker", execArgs("fix", map[string]any{"type": "write", "target": ".github/workflows/ci.yml", "content": "on: [push, pull_request]\n"}))
	for _, tool := range []string{"workspace_diff", "export_workspace"} {
		refused := call(t, cs, tool, map[string]any{"journey_id": "fix"})
		if !refused.isError || refused.out["refused"] != true {
			t.Fatalf("%s of a denied change: %+v", tool, refused)
		}
		if !strings.Contains(refused.text, `change to \".github/workflows/ci.yml\" is refused: it matches denied path \".github/workflows/**\"`) || refused.out["patch"] != nil && refused.out["patch"] != "" {
			t.Errorf("%s refusal: %s", tool, refused.text)
		}
	}
	stop := call(t, cs, "stop_worker", map[string]any{"journey_id": "fix", "workspace": "patch"})
	if !stop.isError || stop.out["refused"] != true || stop.out["state"] != "active" {
		t.Fatalf("stop with patch of a refused change: %+v", stop)
	}
	j, err := b.store.Journey(context.Background(), "alice", "fix")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := b.store.Actions(context.Background(), j.UID)
	if err != nil {
		t.Fatal(err)
	}
	var refusedRows int
	for _, row := range rows {
		if row.Decision == store.DecisionRefused && (row.ActionType == "workspace_diff" || row.ActionType == "export_workspace" || row.ActionType == "stop_worker") {
			refusedRows++
			if len(row.Violations) != 1 || row.Violations[0].ConstraintID != "result.denied_paths" {
				t.Errorf("audit row %+v", row)
			}
		}
	}
	if refusedRows != 3 {
		t.Errorf("%d refused result rows in the audit log, want 3", refusedRows)
	}
	st := must(t, cs, "get_worker_state", map[string]any{"journey_id": "fix"})
	if st["action_count"] != float64(5) { // a read, three writes, a delete
		t.Errorf("diffs and exports counted as actions: %v", st["action_count"])
	}

	// Undone, the change leaves with stop_worker patch, and everything goes.
	must(t, cs, "execute_in_worker", execArgs("fix", map[string]any{"type": "write", "target": ".github/workflows/ci.yml", "content": "on: push\n"}))
	stopped := must(t, cs, "stop_worker", map[string]any{"journey_id": "fix", "workspace": "patch"})
	if stopped["state"] != "deleted" || stopped["patch"] != patch {
		t.Errorf("stop with patch: state %v, same patch %v", stopped["state"], stopped["patch"] == patch)
	}
}

// tarGz builds an archive from entries (a nil content makes a directory).
func tarGz(t *testing.T, entries []*tar.Header, contents map[string]string) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		c := contents[h.Name]
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(c))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(c)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return base64.StdEncoding.EncodeToString(buf.Bytes()), hex.EncodeToString(sum[:])
}

// Bad sources get a clear error naming the problem, and leave nothing in
// Docker or Postgres.
func TestBadSources(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := userRepo(t, root)
	outside := t.TempDir()
	b := &bundle{sources: source.Policy{Roots: []string{root}, MaxArchiveBytes: 4096}}
	if err := b.sources.CheckRoots(); err != nil {
		t.Fatal(err)
	}
	b = setupWith(t, b)
	alice, bob := b.client(t, aliceToken), b.client(t, bobToken)
	must(t, bob, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "bobs"})
	must(t, alice, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "mine"})

	good, goodSum := tarGz(t, []*tar.Header{{Name: "a.txt", Typeflag: tar.TypeReg}}, map[string]string{"a.txt": "a\n"})
	archive := func(entries []*tar.Header, contents map[string]string) map[string]any {
		b64, sum := tarGz(t, entries, contents)
		return map[string]any{"archive": map[string]any{"tar_gz_base64": b64, "sha256": sum}}
	}
	// Random bytes do not compress: the archive passes the 4096-byte limit.
	noise := make([]byte, 8192)
	_, _ = rand.Read(noise)
	for _, tt := range []struct {
		name   string
		source map[string]any
		want   string
	}{
		{"unknown ref", map[string]any{"git": map[string]any{"url": repo, "ref": "no-such-branch"}}, `no ref "no-such-branch"`},
		{"path outside the roots", map[string]any{"git": map[string]any{"url": outside}}, "is not under an allowed source root"},
		{"host not allowed", map[string]any{"git": map[string]any{"url": "https://git.example.com/x.git"}}, "host git.example.com is not an allowed source host"},
		{"credentials in the URL", map[string]any{"git": map[string]any{"url": "https://user:pw@git.example.com/x.git"}}, "must not carry credentials"},
		{"not a repository", map[string]any{"git": map[string]any{"url": root}}, "is not a git repository"},
		{"two sources", map[string]any{"git": map[string]any{"url": repo}, "journey": "bobs"}, "one of git, archive or journey, not several"},
		{"wrong checksum", map[string]any{"archive": map[string]any{"tar_gz_base64": good, "sha256": strings.Repeat("0", 64)}}, "sha256 does not match: the archive's SHA-256 is " + goodSum},
		{"archive over the limit", archive([]*tar.Header{{Name: "big", Typeflag: tar.TypeReg}}, map[string]string{"big": string(noise)}), "the limit is 4096"},
		{"dot-dot entry", archive([]*tar.Header{{Name: "../evil", Typeflag: tar.TypeReg}}, map[string]string{"../evil": "x"}), `path contains ".."`},
		{"absolute entry", archive([]*tar.Header{{Name: "/etc/passwd", Typeflag: tar.TypeReg}}, nil), "absolute paths are refused"},
		{"escaping link", archive([]*tar.Header{{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "../../etc/passwd"}}, nil), `symbolic link "link" points to "../../etc/passwd", outside the workspace`},
		{"absolute link", archive([]*tar.Header{{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}}, nil), "points to the absolute path"},
		{"device file", archive([]*tar.Header{{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}, nil), "is a device or pipe"},
		{"hard link out", archive([]*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/shadow"}}, nil), "hard link"},
		{".git in the archive", archive([]*tar.Header{{Name: ".git/hooks/post-checkout", Typeflag: tar.TypeReg}}, nil), ".git directories are not taken"},
		{"patch that does not apply", map[string]any{"journey": "mine", "patch": "diff --git a/missing.txt b/missing.txt\n--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-a\n+b\n"}, `"missing.txt" is not in the base`},
		{"another caller's journey", map[string]any{"journey": "bobs", "patch": ""}, `no journey "bobs" of yours`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, alice, "spawn_worker", map[string]any{"worker_id": "filesystem_write_v1", "journey_id": "bad", "source": tt.source})
			if !r.isError || !strings.Contains(r.text, tt.want) {
				t.Fatalf("got error=%v %q, want an error containing %q", r.isError, r.text, tt.want)
			}
		})
	}
	// Nothing was created for the refused spawns: no journey row, no
	// container, no volume, no base.
	js, err := b.store.Journeys(context.Background(), "alice", "", store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(js) != 1 || js[0].ID != "mine" {
		t.Errorf("refused sources left journeys: %+v", js)
	}
	filter := "label=meshwork.test=" + b.labels["meshwork.test"]
	out, _ := exec.Command("docker", "ps", "-aq", "--filter", filter).Output()
	if n := len(strings.Fields(string(out))); n != 2 {
		t.Errorf("%d containers, want 2 (mine and bobs)", n)
	}
	out, _ = exec.Command("docker", "volume", "ls", "-q", "--filter", filter).Output()
	if n := len(strings.Fields(string(out))); n != 2 {
		t.Errorf("%d volumes, want 2", n)
	}
	if entries, _ := os.ReadDir(b.baseDir); len(entries) != 2 {
		t.Errorf("%d entries in the base store, want 2: %v", len(entries), entries)
	}
}
