package gate_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// FuzzEvaluate feeds arbitrary actions and journey counters to a gate with
// built-ins and rules: it must never panic, always explain a refusal, and give
// the same decision for the same input.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []struct {
		typ, target, content, pattern, cmd0, tool string
		count                                     int64
		cost                                      float64
	}{
		{"read", "README.md", "", "", "", "", 0, 0},
		{"write", "../x", "hello", "", "", "", 1, 0.5},
		{"exec", "", "", "", "go", "", 0, 0},
		{"exec", "./...", "", "", "go", "test", 0, 0},
		{"exec", "--ext-diff", "", "", "git", "diff", 0, 0},
		{"tool", "", "", "", "", "echo", 5, 3},
		{"search", "a/\u2024\u2024/b", "", "(?i)x", "", "", 0, 0},
		{"list", "app/.ENV", "", "", "", "", 10, 2},
		{"bogus", "\x00", "", "", "", "", -1, -1},
	} {
		f.Add(s.typ, s.target, s.content, s.pattern, s.cmd0, s.tool, s.count, s.cost)
	}
	g := mustCompile(f, ruleDef(sixRules...))
	f.Fuzz(func(t *testing.T, typ, target, content, pattern, cmd0, tool string, count int64, cost float64) {
		a := meshtype.Action{
			Type: meshtype.ActionType(typ), Target: target, Content: content, Pattern: pattern,
			Command: []string{cmd0, tool, target}, Tool: tool, Arguments: map[string]any{"path": target, "n": cost},
		}
		state := meshtype.JourneyState{ActionCount: count, CostUSD: cost}
		first := g.Evaluate(&a, state)
		again := g.Evaluate(&a, state)
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("non-deterministic: %+v then %+v", first, again)
		}
		for _, v := range first {
			if !v.Violated || v.ConstraintID == "" || v.Message == "" {
				t.Fatalf("violation without id or message: %+v", v)
			}
		}
		if _, err := json.Marshal(first); err != nil {
			t.Fatalf("violations do not encode: %v", err)
		}
	})
}

// FuzzEvaluateExec feeds arbitrary argv to a gate allowing go and git
// commands, so that their argument parsers see random flags, values and
// paths: it must never panic, always explain a refusal as a commands
// violation and give the same decision for the same input. An allowed go or
// git argv has been read to its end, so a disallowed flag (or, before any
// "--", an absolute path) appended to it must be refused.
func FuzzEvaluateExec(f *testing.F) {
	for _, s := range []struct{ program, args string }{
		{"go", "test -run TestX -count=1 -v ./pkg/..."},
		{"go", "test -run"},
		{"go", "vet -vettool=/bin/sh ./..."},
		{"go", "build -o ../x"},
		{"go", "test -coverpkg=./...,a/../b -vet=printf,atomic"},
		{"go", "list -json=Dir -f {{.Dir}}"},
		{"git", "diff -U5 HEAD~1 -- main.go"},
		{"git", "diff -wbpU3 --stat=80 --diff-filter=AM -M50% main...x"},
		{"git", "status -sb -uno --porcelain=v2 -z"},
		{"git", "log -5 -n 3 -n3 --format=%H"},
		{"git", "-C /etc diff"},
		{"git", "diff --no-index /etc/passwd x"},
		{"/usr/bin/git", "show HEAD:main.go"},
		{"echo", "-x --y"},
	} {
		f.Add(s.program, s.args)
	}
	def := &meshtype.Definition{
		ID: "shell_v1", Kind: meshtype.KindBuiltin, Tools: []string{"exec"},
		Constraints: meshtype.Constraints{Commands: []string{"go", "git", "/usr/bin/git", "echo"}},
	}
	g := mustCompile(f, def)
	f.Fuzz(func(t *testing.T, program, args string) {
		argv := append([]string{program}, strings.Split(args, " ")...)
		a := meshtype.Action{Type: meshtype.ActionExec, Command: argv}
		first := g.Evaluate(&a, meshtype.JourneyState{})
		again := g.Evaluate(&a, meshtype.JourneyState{})
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("non-deterministic: %+v then %+v", first, again)
		}
		for _, v := range first {
			if !v.Violated || v.ConstraintID != gate.ConstraintCommands || v.Message == "" {
				t.Fatalf("violation not a commands refusal with a message: %+v", v)
			}
		}
		if first != nil || strings.IndexByte(args, 0) >= 0 {
			return
		}
		var extra []string
		switch program {
		case "go":
			extra = []string{"-toolexec=x", "/abs"}
		case "git", "/usr/bin/git":
			if !slices.Contains(argv, "--") {
				extra = []string{"--ext-diff", "-O/x", "/abs"}
			}
		}
		for _, x := range extra {
			b := meshtype.Action{Type: meshtype.ActionExec, Command: append(slices.Clone(argv), x)}
			if g.Evaluate(&b, meshtype.JourneyState{}) == nil {
				t.Fatalf("%q allowed after the allowed %q", x, argv)
			}
		}
	})
}

// FuzzEvaluateResult feeds arbitrary change summaries (paths, renames,
// counters) to a gate with every result check and rules over the summary: it
// must never panic, always explain a refusal with a known id, give the same
// decision for the same input and never trust a count smaller than the list.
func FuzzEvaluateResult(f *testing.F) {
	for _, s := range []struct {
		path, oldPath, status, mode string
		filesChanged, diffBytes     int64
		lines                       int64
		binary                      bool
	}{
		{"main.go", "", "modified", "100644", 1, 120, 3, false},
		{".github/workflows/ci.yml", "ci.yml", "renamed", "100644", 1, 0, 0, false},
		{"ok.go", ".GITHUB/x", "renamed", "100755", 0, -1, -5, false},
		{"../x", "/etc/passwd", "added", "120000", 99, 1 << 40, 1 << 62, true},
		{"a/\u2024\u2024/b", "a\x00b", "deleted", "", -3, 5, 0, false},
		{"", "", "renamed", "", 0, 0, 0, true},
		{"./vendor//x", "vendor/x", "bogus", "160000", 2, 2_000_001, 101, false},
	} {
		f.Add(s.path, s.oldPath, s.status, s.mode, s.filesChanged, s.diffBytes, s.lines, s.binary)
	}
	def := resultDef(resultRules...)
	def.Result.MaxDiffBytes = 2_000_000
	g := mustCompile(f, def)
	known := []string{
		gate.ConstraintResultMaxChangedFiles, gate.ConstraintResultMaxDiffBytes,
		gate.ConstraintResultDenied, gate.ConstraintResultPathSafety,
	}
	for _, r := range resultRules {
		known = append(known, r.ID)
	}
	f.Fuzz(func(t *testing.T, p, oldPath, status, mode string, filesChanged, diffBytes, lines int64, binary bool) {
		file := meshtype.ChangedFile{
			Path: p, OldPath: oldPath, Status: meshtype.ChangeStatus(status), Binary: binary,
			LinesAdded: lines, LinesDeleted: -lines, Mode: mode,
		}
		c := &meshtype.ChangeSummary{
			Files:        []meshtype.ChangedFile{file, file, {Path: oldPath, Status: meshtype.ChangeModified}, {Path: p, OldPath: p}},
			FilesChanged: filesChanged, Renamed: filesChanged, LinesAdded: lines, LinesDeleted: lines, DiffBytes: diffBytes,
		}
		if binary {
			c.Binary = []string{p}
		}
		first := g.EvaluateResult(c)
		again := g.EvaluateResult(c)
		if !reflect.DeepEqual(first, again) {
			t.Fatalf("non-deterministic: %+v then %+v", first, again)
		}
		tooMany := false
		for _, v := range first {
			if !v.Violated || v.Message == "" || !slices.Contains(known, v.ConstraintID) {
				t.Fatalf("violation without a known id or a message: %+v", v)
			}
			tooMany = tooMany || v.ConstraintID == gate.ConstraintResultMaxChangedFiles
		}
		if want := max(filesChanged, int64(len(c.Files))) > def.Result.MaxChangedFiles; tooMany != want {
			t.Fatalf("files_changed %d with %d files: max_changed_files violated %v, want %v", filesChanged, len(c.Files), tooMany, want)
		}
		if _, err := json.Marshal(first); err != nil {
			t.Fatalf("violations do not encode: %v", err)
		}
	})
}

// FuzzSplitShell feeds arbitrary scripts to the shell splitter: it must never
// panic, never return argv words with a NUL (which no exec can pass), never
// return an empty command, and give the same answer for the same script.
func FuzzSplitShell(f *testing.F) {
	for _, s := range []string{
		"go test ./... && curl evil.example",
		`ls | grep x; echo "a b" > out.txt`,
		"$(echo rm) -rf /workspace",
		"(cd sub && go test ./...)",
		"cat <<'EOF'\nhello\nEOF",
		"go test 2>&1 | tee log.txt",
		"if true; then go vet ./...; fi",
		"for f in a b; do echo $f; done",
		"case $x in a) b;; esac",
		`echo a\ b 'c' "d\$" {a,b} ~ *`,
		"{ a; b; } > x < y",
		`echo "abc`,
		"set -euo pipefail; [ -f x ] && y",
		"a\x00b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, script string) {
		first, err := gate.SplitShell(script)
		again, err2 := gate.SplitShell(script)
		if !reflect.DeepEqual(first, again) || (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() {
			t.Fatalf("non-deterministic: %v, %v then %v, %v", first, err, again, err2)
		}
		if err != nil {
			if first != nil {
				t.Fatalf("commands %v with error %v", first, err)
			}
			return
		}
		if len(first) == 0 {
			t.Fatal("no commands and no error")
		}
		for _, c := range first {
			if len(c.Argv) == 0 {
				t.Fatalf("empty argv in %v", first)
			}
			for _, w := range slices.Concat(c.Argv, c.Writes, c.Reads) {
				if strings.IndexByte(w, 0) >= 0 {
					t.Fatalf("NUL in %q of %v", w, c)
				}
			}
		}
	})
}
