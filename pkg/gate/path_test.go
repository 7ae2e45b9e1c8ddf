package gate_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/mtibben/confusables"
	"golang.org/x/text/unicode/norm"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Every target here must be refused by path_safety, for every action type that
// takes a target, whatever the globs say.
func TestPathSafetyRefusesAdversarialTargets(t *testing.T) {
	t.Parallel()
	targets := map[string]string{
		"dotdot alone":            "..",
		"dotdot first":            "../etc/passwd",
		"dotdot middle":           "a/../../etc/passwd",
		"dotdot middle net zero":  "a/../b",
		"dotdot last":             "a/b/..",
		"dotdot trailing slash":   "a/../",
		"dotdot after dot":        "./../x",
		"dotdot doubled slashes":  "a//..//b",
		"absolute":                "/etc/passwd",
		"absolute root":           "/",
		"absolute double slash":   "//etc/passwd",
		"NUL":                     "a\x00.txt",
		"NUL truncation":          "safe.txt\x00/../../etc/passwd",
		"newline":                 "a\nb",
		"carriage return":         "a\rb",
		"tab":                     "a\tb",
		"escape":                  "a\x1b[31m",
		"DEL":                     "a\x7f",
		"C1 control":              "a\u0085b",
		"backslash traversal":     `..\..\windows`,
		"backslash":               `a\b`,
		"invalid UTF-8":           "a\xff\xfe",
		"overlong UTF-8 slash":    "a\xc0\xafb",
		"right-to-left override":  "a\u202egnp.exe",
		"zero-width space":        "a\u200b/.env",
		"zero-width joiner":       "a\u200db",
		"BOM":                     "\ufeffREADME.md",
		"fullwidth dots":          "\uff0e\uff0e/etc",
		"one dot leader":          "\u2024\u2024/x",
		"two dot leader":          "\u2025/x",
		"fullwidth solidus":       "a\uff0fb",
		"division slash":          "a\u2215..\u2215b",
		"fraction slash":          "a\u2044b",
		"ideographic full stop":   "\u3002\u3002/x",
		"NFD decomposed":          "cafe\u0301.txt",
		"too long":                strings.Repeat("a/", gate.MaxPathLen/2+1),
		"segment too long":        strings.Repeat("a", gate.MaxSegmentLen+1),
		"long with dotdot at end": strings.Repeat("a/", 1000) + "..",
	}
	g := mustCompile(t, writerDef())
	for name, target := range targets {
		for _, typ := range []meshtype.ActionType{"read", "write", "list", "search", "delete"} {
			a := meshtype.Action{Type: typ, Target: target, Pattern: "x"}
			vs := g.Evaluate(&a, meshtype.JourneyState{})
			if len(vs) == 0 || vs[0].ConstraintID != gate.ConstraintPathSafety {
				t.Errorf("%s: %s %q: got %+v, want path_safety", name, typ, target, vs)
			}
		}
		if _, err := gate.CleanTarget(target); err == nil {
			t.Errorf("%s: CleanTarget(%q) accepted it", name, target)
		}
	}
}

// Names that merely look unusual are ordinary files and must be allowed.
func TestPathSafetyAllowsOrdinaryNames(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, writerDef())
	for _, target := range []string{
		"README.md", "a/b/c.go", "..foo", "foo..", "a/..b/c", ".hidden", "a/...", "café.txt",
		"日本語/ファイル.txt", "emoji-🙂.md", "with space.txt", "a-b_c.d", "x/./y",
		strings.Repeat("a", gate.MaxSegmentLen), strings.Repeat("ab/", 600) + "c",
	} {
		a := meshtype.Action{Type: "read", Target: target}
		if vs := g.Evaluate(&a, meshtype.JourneyState{}); vs != nil {
			t.Errorf("%q: got %+v, want allowed", target, vs)
		}
	}
}

func TestTargetShapes(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, writerDef())
	for _, tt := range []struct {
		a       meshtype.Action
		refused bool
	}{
		{meshtype.Action{Type: "read"}, true},                                // no target
		{meshtype.Action{Type: "write", Target: "."}, true},                  // the root
		{meshtype.Action{Type: "delete", Target: "./"}, true},                // the root
		{meshtype.Action{Type: "write", Target: "dir/", Content: "x"}, true}, // a directory
		{meshtype.Action{Type: "read", Target: "dir/"}, true},
		{meshtype.Action{Type: "list", Target: "dir/"}, false},
		{meshtype.Action{Type: "list", Target: ""}, false},
		{meshtype.Action{Type: "search", Target: "", Pattern: "x"}, false},
	} {
		vs := g.Evaluate(&tt.a, meshtype.JourneyState{})
		if refused := len(vs) > 0; refused != tt.refused {
			t.Errorf("%+v: got %+v, want refused=%v", tt.a, vs, tt.refused)
		}
	}
}

func TestCleanTarget(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"": ".", ".": ".", "./": ".", "a//b": "a/b", "./a/./b/": "a/b", "a/b": "a/b",
	} {
		got, err := gate.CleanTarget(in)
		if err != nil || got != want {
			t.Errorf("CleanTarget(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// Denied globs also match the compatibility form, so a full-width lookalike
// of a denied name is refused rather than treated as a different file.
func TestDeniedMatchesCompatibilityForm(t *testing.T) {
	t.Parallel()
	g := mustCompile(t, writerDef())
	a := meshtype.Action{Type: "read", Target: "app/.\uff45\uff4e\uff56"} // .ｅｎｖ
	vs := g.Evaluate(&a, meshtype.JourneyState{})
	if len(vs) != 1 || vs[0].ConstraintID != gate.ConstraintDenied {
		t.Errorf("got %+v, want denied_paths", vs)
	}
}

// Every character of the Unicode data's line, paragraph and space
// separators (but the plain space) and every overlay combining mark is
// refused in a path, and a sample of ordinary names still passes. The table
// comes from Go's Unicode and normalization tables, not a hand list.
func TestPathRefusesSeparatorClassesFromUnicodeData(t *testing.T) {
	t.Parallel()
	// The table: separators and overlay marks from the character
	// database, and every punctuation, symbol or mark whose confusables
	// skeleton (UTS #39) holds a slash, backslash or dot.
	var refused []rune
	confusable := 0
	for r := rune(0x80); r <= unicode.MaxRune; r++ {
		switch {
		case unicode.In(r, unicode.Zl, unicode.Zp, unicode.Zs) || norm.NFC.PropertiesString(string(r)).CCC() == 1:
			refused = append(refused, r)
		case unicode.In(r, unicode.P, unicode.S, unicode.M) && strings.ContainsAny(confusables.Skeleton(string(r)), `/\.`):
			refused = append(refused, r)
			confusable++
		}
	}
	if len(refused) < 30 || confusable < 30 {
		t.Fatalf("only %d characters in the classes, %d confusables: the tables are not what this test expects", len(refused), confusable)
	}
	for _, r := range refused {
		p := "docs/a" + string(r) + "b.md"
		if !norm.NFC.IsNormalString(p) {
			continue // refused as not NFC anyway
		}
		if _, err := gate.CleanTarget(p); err == nil {
			t.Errorf("%U (%q) is accepted in a path", r, p)
		}
	}
	// Letters and digits confusable with a separator or dot are refused
	// only as a whole segment that reads as one.
	for _, bad := range []string{"ノ/x", "\u0660\u0660/x", "a/\u0701/b", "\u3002\u3002/x"} {
		if _, err := gate.CleanTarget(bad); err == nil {
			t.Errorf("%q is accepted", bad)
		}
	}
	for _, ok := range []string{"docs/résumé.md", "日本語/ファイル.txt", "ノート/メモ.md", "a b/c d.txt", "naïve café/ñ.go", "हिन्दी/पाठ.md", "\u0661\u0660/x", "..."} {
		if _, err := gate.CleanTarget(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}
