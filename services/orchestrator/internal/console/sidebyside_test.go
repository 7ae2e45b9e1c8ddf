package console

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/services/orchestrator/api"
)

// A patch side by side: a changed line beside its replacement, runs of
// unequal length, context on both sides with both numbers, a new file, a
// deleted one, a rename, a binary file; a patch that does not parse is an
// error (the page shows it as text).
func TestSideBySide(t *testing.T) {
	t.Parallel()
	patch := `diff --git a/calc/add.go b/calc/add.go
index 1111111..2222222 100644
--- a/calc/add.go
+++ b/calc/add.go
@@ -1,5 +1,6 @@
 package calc
 
-func Add(a, b int) int { return a - b }
+// Add adds.
+func Add(a, b int) int { return a + b }
 
-// old comment
+// <script>alert(1)</script>
diff --git a/NOTES.md b/NOTES.md
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/NOTES.md
@@ -0,0 +1 @@
+hello
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 4444444..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/old.txt b/new.txt
similarity index 100%
rename from old.txt
rename to new.txt
diff --git a/logo.png b/logo.png
index 5555555..6666666 100644
Binary files a/logo.png and b/logo.png differ
`
	d, err := sideBySide(patch)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Files) != 5 || d.Cut {
		t.Fatalf("%d files (cut %v), want 5", len(d.Files), d.Cut)
	}
	add := d.Files[0]
	var got []string
	for _, r := range add.Rows {
		got = append(got, r.Kind+"|"+r.OldNo+"|"+r.Old+"|"+r.NewNo+"|"+r.New)
	}
	want := []string{
		"hunk||@@ -1,5 +1,6 @@||",
		"same|1|package calc|1|package calc",
		"same|2||2|",
		"changed|3|func Add(a, b int) int { return a - b }|3|// Add adds.",
		"added|||4|func Add(a, b int) int { return a + b }",
		"same|4||5|",
		"changed|5|// old comment|6|// <script>alert(1)</script>",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for i, want := range []struct {
		name, change   string
		added, removed int64
	}{
		{"calc/add.go", "modified", 3, 2}, {"NOTES.md", "added", 1, 0}, {"gone.txt", "deleted", 0, 1}, {"new.txt", "renamed from old.txt", 0, 0}, {"logo.png", "modified", 0, 0},
	} {
		if f := d.Files[i]; f.Name != want.name || f.Change != want.change || f.Added != want.added || f.Removed != want.removed {
			t.Errorf("file %d: %s %s +%d -%d, want %s %s +%d -%d", i, f.Name, f.Change, f.Added, f.Removed, want.name, want.change, want.added, want.removed)
		}
	}
	if r := d.Files[2].Rows[1]; r.Kind != "removed" || r.OldNo != "1" || r.Old != "bye" || r.New != "" {
		t.Errorf("the deleted file's line: %+v", r)
	}
	if !d.Files[4].Binary {
		t.Error("logo.png is not binary")
	}

	if _, err := sideBySide("diff --git a/x b/x\n@@ -1 +1 @@\n-a\n"); err == nil {
		t.Error("a fragment that does not add up was accepted")
	}
	many := "diff --git a/big b/big\n--- a/big\n+++ b/big\n@@ -0,0 +1,6000 @@\n" + strings.Repeat("+x\n", 6000)
	big, err := sideBySide(many + strings.Replace(many, "a/big b/big\n--- a/big\n+++ b/big", "a/more b/more\n--- a/more\n+++ b/more", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !big.Cut || len(big.Files) != 1 || len(big.Files[0].Rows) != maxSideRows {
		t.Errorf("a 12,000-line patch: cut %v, %d files shown, %d rows", big.Cut, len(big.Files), len(big.Files[0].Rows))
	}
}

// The run page shows a patch side by side, its text escaped (an agent wrote
// it), with the whole patch as text below; a patch that does not parse is
// shown as text only. MESHWORK_SCREENSHOTS keeps the page (with its
// stylesheet inlined) to look at.
func TestRunPageShowsThePatchSideBySide(t *testing.T) {
	t.Parallel()
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	patch := "diff --git a/a.go b/a.go\n--- a/a.go\n+++ b/a.go\n@@ -1,2 +1,2 @@\n package a\n-var x = 1\n+var x = \"<img src=x onerror=alert(1)>\"\n"
	render := func(patch string) string {
		t.Helper()
		d := runData{RunView: api.RunView{Run: api.Run{ID: "r1", Pipeline: "coding", Status: "succeeded"}, PatchNode: "implement"}, Patch: patch}
		d.SideBySide, _ = sideBySide(patch)
		var b bytes.Buffer
		if err := pages["run"].Execute(&b, page{Title: "Run r1", Caller: "alice", CSRF: "c", Data: d}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	html := render(patch)
	for _, want := range []string{
		`<table class="sbs">`, `<code>a.go</code> <span class="change">modified</span>`,
		`<tr class="changed"><td class="ln">2</td><td class="old">var x = 1</td><td class="ln">2</td><td class="new">var x = &#34;&lt;img src=x onerror=alert(1)&gt;&#34;</td></tr>`,
		`<summary>The patch as text</summary>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(html, "<img") {
		t.Error("the patch made markup")
	}
	if broken := render("diff --git a/x b/x\n@@ -1 +1 @@\n-a\n"); strings.Contains(broken, `class="sbs"`) || !strings.Contains(broken, `<pre class="diff">diff --git a/x b/x`) {
		t.Errorf("a patch that does not parse:\n%s", broken)
	}
	if dir := os.Getenv("MESHWORK_SCREENSHOTS"); dir != "" {
		css, err := os.ReadFile("static/console.css")
		if err != nil {
			t.Fatal(err)
		}
		page := strings.Replace(html, `<link rel="stylesheet" href="/static/console.css">`, "<style>"+string(css)+"</style>", 1)
		if err := os.WriteFile(filepath.Join(dir, "side-by-side.html"), []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzSideBySide: whatever an agent's patch holds, laying it out never
// panics, and a layout keeps to its bound.
func FuzzSideBySide(f *testing.F) {
	f.Add("diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,2 +1,2 @@\n x\n-y\n+z\n")
	f.Add("diff --git a/a b/b\nrename from a\nrename to b\n")
	f.Add("diff --git a/x b/x\nBinary files a/x and b/x differ\n")
	f.Add("@@ -1 +1 @@\n-a\n+b\n")
	f.Fuzz(func(t *testing.T, patch string) {
		d, err := sideBySide(patch)
		if err != nil {
			return
		}
		rows := 0
		for _, f := range d.Files {
			rows += len(f.Rows)
		}
		if rows > maxSideRows {
			t.Errorf("%d rows, over the bound", rows)
		}
	})
}
