package gate_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// resultDef is a writer whose result block sets every built-in limit.
func resultDef(rules ...meshtype.Rule) *meshtype.Definition {
	def := writerDef()
	def.Result = meshtype.ResultConstraints{
		MaxChangedFiles: 3,
		MaxDiffBytes:    1_000_000,
		DeniedPaths:     []string{".github/**", "**/.env", "go.sum"},
		Rules:           rules,
	}
	return def
}

// summary builds a change summary of the given files, counted as a diff
// would count them.
func summary(files ...meshtype.ChangedFile) *meshtype.ChangeSummary {
	s := meshtype.Summarize(files, 100)
	return &s
}

func modified(p string) meshtype.ChangedFile {
	return meshtype.ChangedFile{Path: p, Status: meshtype.ChangeModified, LinesAdded: 1, LinesDeleted: 1, Mode: "100644"}
}

func renamed(from, to string) meshtype.ChangedFile {
	return meshtype.ChangedFile{Path: to, OldPath: from, Status: meshtype.ChangeRenamed, Mode: "100644"}
}

// resultCase is a change summary and the violations EvaluateResult must
// report for it, exactly and in order.
type resultCase struct {
	name string
	c    *meshtype.ChangeSummary
	want []meshtype.Violation
}

// checkEvaluateResult runs each case against g as a parallel subtest.
func checkEvaluateResult(t *testing.T, g *gate.Gate, cases []resultCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := g.EvaluateResult(tt.c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestEvaluateResultBuiltins(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, resultDef())
	checkEvaluateResult(t, g, []resultCase{
		{"allowed", summary(modified("main.go"), modified("docs/a.md")), nil},
		{"empty change", &meshtype.ChangeSummary{}, nil},
		{"files at limit", summary(modified("a"), modified("b"), modified("c")), nil},
		{"files over limit", summary(modified("a"), modified("b"), modified("c"), modified("d")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultMaxChangedFiles, Violated: true, Message: "the change touches 4 files; the limit is 3"},
		}},
		{"count larger than the list", &meshtype.ChangeSummary{FilesChanged: 12}, []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultMaxChangedFiles, Violated: true, Message: "the change touches 12 files; the limit is 3"},
		}},
		{"count smaller than the list is not trusted", &meshtype.ChangeSummary{
			FilesChanged: 1, Files: []meshtype.ChangedFile{modified("a"), modified("b"), modified("c"), modified("d"), modified("e")},
		}, []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultMaxChangedFiles, Violated: true, Message: "the change touches 5 files; the limit is 3"},
		}},
		{"diff at limit", &meshtype.ChangeSummary{DiffBytes: 1_000_000}, nil},
		{"diff over limit", &meshtype.ChangeSummary{DiffBytes: 1_000_001}, []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultMaxDiffBytes, Violated: true, Message: "the patch is 1000001 bytes; the limit is 1000000 bytes"},
		}},
		{"diff size unknown", &meshtype.ChangeSummary{DiffBytes: -1}, []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultMaxDiffBytes, Violated: true, Message: "the patch size is unknown (-1 bytes); the limit is 1000000 bytes"},
		}},
		{"denied", summary(modified(".github/workflows/ci.yml")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to ".github/workflows/ci.yml" is refused: it matches denied path ".github/**"`},
		}},
		{"denied nested env", summary(meshtype.ChangedFile{Path: "app/.env", Status: meshtype.ChangeAdded}), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to "app/.env" is refused: it matches denied path "**/.env"`},
		}},
		{"denied case-insensitively", summary(modified("GO.SUM")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to "GO.SUM" is refused: it matches denied path "go.sum"`},
		}},
		{"denied deletion", summary(meshtype.ChangedFile{Path: ".github/CODEOWNERS", Status: meshtype.ChangeDeleted}), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to ".github/CODEOWNERS" is refused: it matches denied path ".github/**"`},
		}},
		{"not denied lookalike", summary(modified("app/.envrc"), modified("github/ci.yml")), nil},
		{"one violation per denied path", summary(modified(".github/a.yml"), modified("ok.go"), modified("go.sum")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to ".github/a.yml" is refused: it matches denied path ".github/**"`},
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to "go.sum" is refused: it matches denied path "go.sum"`},
		}},
		{"rename into a denied path", summary(renamed("ci.yml", ".github/workflows/ci.yml")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to ".github/workflows/ci.yml" is refused: it matches denied path ".github/**"`},
		}},
		{"rename out of a denied path", summary(renamed(".github/workflows/ci.yml", "ci.yml")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `rename of ".github/workflows/ci.yml" to "ci.yml" is refused: it matches denied path ".github/**"`},
		}},
		{"rename within a denied path", summary(renamed(".github/a.yml", ".github/b.yml")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to ".github/b.yml" is refused: it matches denied path ".github/**"`},
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `rename of ".github/a.yml" to ".github/b.yml" is refused: it matches denied path ".github/**"`},
		}},
		{"old path checked whatever the status", summary(meshtype.ChangedFile{Path: "x", OldPath: "go.sum", Status: meshtype.ChangeModified}), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `rename of "go.sum" to "x" is refused: it matches denied path "go.sum"`},
		}},
		{"rename without its old path", summary(meshtype.ChangedFile{Path: "x", Status: meshtype.ChangeRenamed}), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `the rename to "x" does not say where it is from (no old_path)`},
		}},
		{"absolute path", summary(modified("/etc/passwd")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `change to "/etc/passwd" is refused: absolute paths are refused; give a path relative to the workspace root`},
		}},
		{"dotdot in old path", summary(renamed("../outside", "inside")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `rename of "../outside" to "inside" is refused: path contains ".."; it must stay inside the workspace`},
		}},
		{"control character", summary(modified("a\nb")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `change to "a\nb" is refused: path contains the control character 0x0a`},
		}},
		{"empty path", summary(modified("")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `change to "" is refused: the path is empty`},
		}},
		{"root", summary(modified(".")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `change to "." is refused: the path names the workspace root`},
		}},
		{"dot segment hides a denied path", summary(modified("./.github/ci.yml")), []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `change to "./.github/ci.yml" is refused: the path is not in canonical form (".github/ci.yml")`},
		}},
		{"every violation at once", &meshtype.ChangeSummary{
			FilesChanged: 4, DiffBytes: 2_000_000,
			Files: []meshtype.ChangedFile{modified("go.sum"), modified("a//b"), renamed("ok", "app/.env"), modified("fine.go")},
		}, []meshtype.Violation{
			{ConstraintID: gate.ConstraintResultMaxChangedFiles, Violated: true, Message: "the change touches 4 files; the limit is 3"},
			{ConstraintID: gate.ConstraintResultMaxDiffBytes, Violated: true, Message: "the patch is 2000000 bytes; the limit is 1000000 bytes"},
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to "go.sum" is refused: it matches denied path "go.sum"`},
			{ConstraintID: gate.ConstraintResultPathSafety, Violated: true, Message: `change to "a//b" is refused: the path is not in canonical form ("a/b")`},
			{ConstraintID: gate.ConstraintResultDenied, Violated: true, Message: `change to "app/.env" is refused: it matches denied path "**/.env"`},
		}},
	})
}

// Without a result block, path safety and the action gate's denied globs
// apply: no limits, no globs of its own.
func TestEvaluateResultWithoutResultBlock(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, writerDef())
	big := summary(modified(".github/ci.yml"), modified("go.sum"), modified("a"), modified("b"))
	big.DiffBytes = 1 << 40
	if vs := g.EvaluateResult(big); vs != nil {
		t.Errorf("got %+v, want no violations", vs)
	}
	// The action gate's denied globs apply to changes too.
	if got := ids(g.EvaluateResult(summary(modified("app/.env")))); !reflect.DeepEqual(got, []string{gate.ConstraintResultDenied}) {
		t.Errorf("app/.env: got %v, want [%s]", got, gate.ConstraintResultDenied)
	}
	// A .git directory is never a change's, denied or not.
	if got := ids(g.EvaluateResult(summary(modified(".git/config")))); !reflect.DeepEqual(got, []string{gate.ConstraintResultPathSafety}) {
		t.Errorf(".git/config: got %v, want [%s]", got, gate.ConstraintResultPathSafety)
	}
	if got := ids(g.EvaluateResult(summary(modified("../x")))); !reflect.DeepEqual(got, []string{gate.ConstraintResultPathSafety}) {
		t.Errorf("../x: got %v, want [%s]", got, gate.ConstraintResultPathSafety)
	}
}

// resultRules covers the shapes a result rule takes: counters, exists() over
// files, a field of a rename, the binary list and the strings extension.
var resultRules = []meshtype.Rule{
	{ID: "small_change", Expression: "result.lines_added + result.lines_deleted <= 100", Message: "the change is too large to review"},
	{ID: "no_vendor", Expression: "!result.files.exists(f, f.path.startsWith('vendor/') || f.old_path.startsWith('vendor/'))", MessageExpression: "'vendored files changed: ' + result.files.filter(f, f.path.startsWith('vendor/') || f.old_path.startsWith('vendor/')).map(f, f.path).join(', ')"},
	{ID: "no_binaries", Expression: "size(result.binary) == 0", MessageExpression: "string(size(result.binary)) + ' binary files'"},
	{ID: "no_deletions", Expression: "result.deleted == 0 && !result.files.exists(f, f.status == 'deleted')"},
	{ID: "no_executables", Expression: "result.files.all(f, f.mode != '100755')", Message: "executable files are refused"},
	{ID: "counted", Expression: "result.files_changed == size(result.files) || result.files_changed > 0"},
}

func TestEvaluateResultRules(t *testing.T) {
	t.Parallel()
	def := writerDef()
	def.Result.Rules = resultRules
	g := mustCompile(t, def)
	bin := modified("logo.png")
	bin.Binary, bin.LinesAdded, bin.LinesDeleted = true, 0, 0
	exe := modified("run.sh")
	exe.Mode = "100755"
	checkEvaluateResult(t, g, []resultCase{
		{"all true", summary(modified("main.go"), renamed("a.go", "b.go")), nil},
		{"nil files", &meshtype.ChangeSummary{}, nil},
		{"counter", summary(meshtype.ChangedFile{Path: "big.go", Status: meshtype.ChangeAdded, LinesAdded: 101}), []meshtype.Violation{
			{ConstraintID: "small_change", Violated: true, Message: "the change is too large to review"},
		}},
		{"exists over paths with messageExpression", summary(modified("vendor/a/x.go"), modified("main.go"), modified("vendor/b/y.go")), []meshtype.Violation{
			{ConstraintID: "no_vendor", Violated: true, Message: "vendored files changed: vendor/a/x.go, vendor/b/y.go"},
		}},
		{"old path of a rename", summary(renamed("vendor/a.go", "a.go")), []meshtype.Violation{
			{ConstraintID: "no_vendor", Violated: true, Message: "vendored files changed: a.go"},
		}},
		{"binary list", summary(bin), []meshtype.Violation{
			{ConstraintID: "no_binaries", Violated: true, Message: "1 binary files"},
		}},
		{"status and default message", summary(meshtype.ChangedFile{Path: "old.go", Status: meshtype.ChangeDeleted, LinesDeleted: 3}), []meshtype.Violation{
			{ConstraintID: "no_deletions", Violated: true, Message: "rule no_deletions refused the change"},
		}},
		{"mode", summary(exe), []meshtype.Violation{
			{ConstraintID: "no_executables", Violated: true, Message: "executable files are refused"},
		}},
	})
}

// Rules see the file count the limit was checked against, never a smaller
// one the caller wrote.
func TestEvaluateResultRulesSeeTheTrueCount(t *testing.T) {
	t.Parallel()
	def := writerDef()
	def.Result.Rules = []meshtype.Rule{{ID: "few_files", Expression: "result.files_changed <= 2", MessageExpression: "string(result.files_changed) + ' files'"}}
	g := mustCompile(t, def)
	c := &meshtype.ChangeSummary{FilesChanged: 1, Files: []meshtype.ChangedFile{modified("a"), modified("b"), modified("c")}}
	want := []meshtype.Violation{{ConstraintID: "few_files", Violated: true, Message: "3 files"}}
	if got := g.EvaluateResult(c); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if c.FilesChanged != 1 {
		t.Errorf("EvaluateResult changed the caller's summary: files_changed %d", c.FilesChanged)
	}
}

// A result rule that errors at run time or runs out of budget refuses the
// change; a failing messageExpression falls back to the message.
func TestEvaluateResultRulesFailClosed(t *testing.T) {
	t.Parallel()
	def := writerDef()
	def.Result.Rules = []meshtype.Rule{
		{ID: "first_is_go", Expression: "result.files[0].path.endsWith('.go')", Message: "the first file must be Go"},
		{ID: "quadratic", Expression: "result.files.all(x, result.files.all(y, size(x.path) + size(y.path) >= 0))"},
		{ID: "bad_message", Expression: "result.files_changed < 2", Message: "fallback", MessageExpression: "result.files[size(result.files)].path"},
	}
	g := mustCompile(t, def)

	if vs := g.EvaluateResult(summary(modified("main.go"))); vs != nil {
		t.Errorf("one Go file: got %+v, want no violations", vs)
	}
	vs := g.EvaluateResult(&meshtype.ChangeSummary{})
	if len(vs) != 1 || vs[0].ConstraintID != "first_is_go" || !strings.Contains(vs[0].Message, "could not be evaluated, so the change is refused") {
		t.Errorf("no files: got %+v, want first_is_go to fail closed", vs)
	}
	files := make([]meshtype.ChangedFile, 2000)
	for i := range files {
		files[i] = modified("f.go")
	}
	got := g.EvaluateResult(summary(files...))
	if len(got) != 2 || got[0].ConstraintID != "quadratic" || !strings.Contains(got[0].Message, "could not be evaluated") {
		t.Errorf("2000 files: got %+v, want quadratic to run out of budget", got)
	}
	if len(got) == 2 && (got[1].ConstraintID != "bad_message" || got[1].Message != "fallback") {
		t.Errorf("2000 files: got %+v, want bad_message with its fallback message", got[1])
	}
}

func TestCompileResultErrors(t *testing.T) {
	t.Parallel()
	rule := func(id, expr string) meshtype.ResultConstraints {
		return meshtype.ResultConstraints{Rules: []meshtype.Rule{{ID: id, Expression: expr}}}
	}
	tests := []struct {
		name     string
		r        meshtype.ResultConstraints
		wantPath string
		wantMsg  string
	}{
		{"syntax", rule("r", "result.files_changed >"), "result.rules[0].expression", "invalid CEL"},
		{"unknown field", rule("r", "result.filez == []"), "result.rules[0].expression", "undefined field 'filez'"},
		{"unknown file field", rule("r", "result.files.all(f, f.name != '')"), "result.rules[0].expression", "undefined field 'name'"},
		{"action is not in scope", rule("r", "action.target == 'x'"), "result.rules[0].expression", "undeclared reference"},
		{"not bool", rule("r", "result.files_changed"), "result.rules[0].expression", "must evaluate to bool"},
		{"empty", rule("r", ""), "result.rules[0].expression", "empty expression"},
		{"bad id", rule("No-Vendor", "true"), "result.rules[0].id", "must match"},
		{"result built-in id", rule("result.denied_paths", "true"), "result.rules[0].id", "must match"},
		{"action built-in id", rule("denied_paths", "true"), "result.rules[0].id", "built-in"},
		{"duplicate id", meshtype.ResultConstraints{Rules: []meshtype.Rule{{ID: "a", Expression: "true"}, {ID: "b", Expression: "true"}, {ID: "a", Expression: "true"}}}, "result.rules[2].id", "used twice"},
		{"message expression not string", meshtype.ResultConstraints{Rules: []meshtype.Rule{{ID: "a", Expression: "true", MessageExpression: "result.files_changed"}}}, "result.rules[0].messageExpression", "must evaluate to string"},
		{"bad glob", meshtype.ResultConstraints{DeniedPaths: []string{"ok/**", "a/[b"}}, "result.denied_paths[1]", "invalid glob"},
		{"absolute glob", meshtype.ResultConstraints{DeniedPaths: []string{"/etc/**"}}, "result.denied_paths[0]", "invalid glob"},
		{"empty glob", meshtype.ResultConstraints{DeniedPaths: []string{""}}, "result.denied_paths[0]", "invalid glob"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			def := writerDef()
			def.Result = tt.r
			wantCompileError(t, def, tt.wantPath, tt.wantMsg)
		})
	}
}

// A result rule's id may repeat an action rule's: they are reported by
// different evaluations.
func TestResultRuleIDsAreTheirOwn(t *testing.T) {
	t.Parallel()
	def := writerDef()
	def.Constraints.Rules = []meshtype.Rule{{ID: "no_vendor", Expression: "!action.target.startsWith('vendor/')"}}
	def.Result.Rules = []meshtype.Rule{{ID: "no_vendor", Expression: "!result.files.exists(f, f.path.startsWith('vendor/'))"}}
	g := mustCompile(t, def)
	if got := ids(g.EvaluateResult(summary(modified("vendor/x.go")))); !reflect.DeepEqual(got, []string{"no_vendor"}) {
		t.Errorf("result: got %v, want [no_vendor]", got)
	}
	// The action gate runs action rules only.
	if vs := g.Evaluate(&meshtype.Action{Type: "read", Target: "main.go"}, meshtype.JourneyState{}); vs != nil {
		t.Errorf("action: got %+v, want no violations", vs)
	}
}

// A changed symbolic link whose target leaves the workspace is refused: a
// patch would plant it in the user's checkout.
func TestEvaluateResultLinkTargets(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, writerDef())
	for _, tt := range []struct {
		path, target string
		refused      bool
	}{
		{"docs/l", "../README.md", false},
		{"docs/l", "../../etc/passwd", true},
		{"l", "/home/u/.ssh", true},
		{"a/b/l", "../c/./d", false},
	} {
		f := modified(tt.path)
		f.LinkTarget = tt.target
		got := ids(g.EvaluateResult(summary(f)))
		if refused := reflect.DeepEqual(got, []string{gate.ConstraintResultPathSafety}); refused != tt.refused || (!tt.refused && len(got) > 0) {
			t.Errorf("%s -> %s: %v, want refused %v", tt.path, tt.target, got, tt.refused)
		}
	}
}

// What a patch carries is what was judged, on every file system git checks
// it out on: no name that starts with a double quote (git would read it as
// C-quoted), no
// name another file system takes for .git, no link into .git, and nothing
// written through a link the change makes, in any letter case.
func TestEvaluateResultPathsGitReadsOtherwise(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, resultDef())
	link := func(p, target string) meshtype.ChangedFile {
		return meshtype.ChangedFile{Path: p, Status: meshtype.ChangeAdded, Mode: "120000", LinkTarget: target}
	}
	added := func(p string) meshtype.ChangedFile {
		return meshtype.ChangedFile{Path: p, Status: meshtype.ChangeAdded, Mode: "100644"}
	}
	for _, tt := range []struct {
		name    string
		files   []meshtype.ChangedFile
		refused bool
	}{
		{"a quoted rename into a denied path", []meshtype.ChangedFile{renamed("docs/ci.yml", `".github/workflows/evil.yml"`)}, true},
		{"a name that starts with a quote", []meshtype.ChangedFile{added(`"hi".txt`)}, true},
		{"a quote inside a name", []meshtype.ChangedFile{added(`docs/say "hi".txt`)}, false},
		{"a .git with a trailing dot", []meshtype.ChangedFile{added(".git./hooks/pre-commit")}, true},
		{"git's short name on NTFS", []meshtype.ChangedFile{added("sub/GIT~1/config")}, true},
		{"a link into .git", []meshtype.ChangedFile{link("X", ".git")}, true},
		{"a write through a new link in another case", []meshtype.ChangedFile{link("X", "docs"), added("x/hooks/post-checkout")}, true},
		{"a write through a new link in its case", []meshtype.ChangedFile{link("X", "docs"), added("X/notes.md")}, true},
		{"a link and a file beside it", []meshtype.ChangedFile{link("X", "docs"), added("Xylophone/notes.md")}, false},
		{".github is not .git", []meshtype.ChangedFile{added("src/.gitignore"), added("src/.github.md")}, false},
	} {
		got := ids(g.EvaluateResult(summary(tt.files...)))
		refused := slices.Contains(got, gate.ConstraintResultPathSafety)
		if refused != tt.refused || (!tt.refused && len(got) > 0) {
			t.Errorf("%s: %v, want refused %v", tt.name, got, tt.refused)
		}
	}
}
