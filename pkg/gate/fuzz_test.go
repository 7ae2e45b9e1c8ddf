package gate_test

import (
	"encoding/json"
	"reflect"
	"slices"
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
			Command: []string{cmd0, target}, Tool: tool, Arguments: map[string]any{"path": target, "n": cost},
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
