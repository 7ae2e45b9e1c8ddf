package gate

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/mtibben/confusables"
	"golang.org/x/text/unicode/norm"

	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Limits on targets, in bytes: Linux's PATH_MAX and NAME_MAX.
const (
	MaxPathLen    = 4096
	MaxSegmentLen = 255
)

// glob is one compiled allowed or denied pattern.
type glob struct {
	pattern string
	lower   string // for denied paths, which match case-insensitively
}

func compileGlobs(field string, patterns []string) ([]glob, error) {
	out := make([]glob, 0, len(patterns))
	for i, p := range patterns {
		if p == "" || p[0] == '/' || !doublestar.ValidatePattern(p) {
			return nil, &CompileError{Path: fmt.Sprintf("%s[%d]", field, i), Msg: fmt.Sprintf("invalid glob %q", p)}
		}
		out = append(out, glob{pattern: p, lower: strings.ToLower(p)})
	}
	return out, nil
}

// CleanTarget checks a target lexically and returns its canonical form, the
// one executors should open: relative, slash-separated, without "." or empty
// segments; "." for the workspace root. An empty target means the root. The
// error says why a target is unsafe.
func CleanTarget(target string) (string, error) {
	if msg := targetProblem(target); msg != "" {
		return "", fmt.Errorf("%s", msg)
	}
	return cleanTarget(target), nil
}

func cleanTarget(target string) string {
	if target == "" {
		return "."
	}
	return path.Clean(target)
}

// targetProblem returns why target is lexically unsafe, or "".
func targetProblem(t string) string {
	if len(t) > MaxPathLen {
		return fmt.Sprintf("path is %d bytes long; the limit is %d", len(t), MaxPathLen)
	}
	if msg := segmentProblem(t); msg != "" {
		return msg
	}
	ascii := true
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c >= utf8.RuneSelf {
			ascii = false
			continue
		}
		switch {
		case c == 0:
			return "path contains a NUL byte"
		case c < 0x20 || c == 0x7f:
			return fmt.Sprintf("path contains the control character %#02x", c)
		case c == '\\':
			return "path contains a backslash; use / to separate directories"
		}
	}
	if ascii {
		return ""
	}
	if !utf8.ValidString(t) {
		return "path is not valid UTF-8"
	}
	for _, r := range t {
		switch {
		case unicode.IsControl(r):
			return fmt.Sprintf("path contains the control character %U", r)
		case unicode.Is(unicode.Cf, r):
			return fmt.Sprintf("path contains the invisible formatting character %U", r)
		case isSeparatorLookalike(r):
			return fmt.Sprintf("path contains %U, which looks like a path separator or dot", r)
		case unicode.In(r, unicode.Zl, unicode.Zp):
			return fmt.Sprintf("path contains the line or paragraph separator %U", r)
		case r != ' ' && unicode.Is(unicode.Zs, r):
			return fmt.Sprintf("path contains %U, a space other than U+0020 that a reader cannot tell from it", r)
		case isOverlayMark(r):
			return fmt.Sprintf("path contains the combining mark %U, which is drawn over the character before it (a slash or a stroke over a letter reads as a separator)", r)
		}
	}
	if !norm.NFC.IsNormalString(t) {
		return "path is not in Unicode normalization form C (NFC); send the composed form"
	}
	// Compatibility forms must not turn into separators or dot segments either
	// (U+2024 ONE DOT LEADER becomes "." under NFKC, for example).
	for seg := range strings.SplitSeq(t, "/") {
		if k := norm.NFKC.String(seg); k != seg && (k == ".." || strings.ContainsAny(k, `/\`)) {
			return fmt.Sprintf("path segment %q has the compatibility form %q, a separator or a dot segment", seg, k)
		}
		if lookalikeSegment(seg) {
			return fmt.Sprintf("path segment %q reads as separators or dots", seg)
		}
	}
	return ""
}

// segmentProblem checks the shape of a slash-separated path.
func segmentProblem(t string) string {
	if strings.HasPrefix(t, "/") {
		return "absolute paths are refused; give a path relative to the workspace root"
	}
	for seg := range strings.SplitSeq(t, "/") {
		if seg == ".." {
			return `path contains ".."; it must stay inside the workspace`
		}
		if len(seg) > MaxSegmentLen {
			return fmt.Sprintf("a path segment is %d bytes long; the limit is %d", len(seg), MaxSegmentLen)
		}
	}
	return ""
}

// isOverlayMark reports combining marks of canonical combining class 1,
// "overlay" in the Unicode data: drawn through the character before them,
// they turn a letter into what reads as a slash or a struck-out name
// (U+0338 COMBINING LONG SOLIDUS OVERLAY, U+20E5 COMBINING REVERSE SOLIDUS
// OVERLAY, ...). The class comes from the normalization tables, so the set
// follows the Unicode version Go ships.
func isOverlayMark(r rune) bool {
	return norm.NFC.PropertiesString(string(r)).CCC() == 1
}

// isSeparatorLookalike reports punctuation, symbols and marks that the
// Unicode confusables data (UTS #39, through the skeleton) maps to something
// holding "/", "\" or ".": DIVISION SLASH, FRACTION SLASH, ONE DOT LEADER,
// TWO DOT LEADER, FULLWIDTH REVERSE SOLIDUS and their kind. Letters and
// digits confusable with them (KATAKANA LETTER NO, ARABIC-INDIC DIGIT ZERO)
// belong to scripts people name files in, so they are refused only when a
// whole segment reads as separators or dots (lookalikeSegment).
func isSeparatorLookalike(r rune) bool {
	return r >= utf8.RuneSelf && unicode.In(r, unicode.P, unicode.S, unicode.M) && strings.ContainsAny(confusables.Skeleton(string(r)), `/\.`)
}

// lookalikeSegment reports a non-ASCII segment that displays as nothing but
// separators and dots: its confusables skeleton is made of them ("٠٠" reads
// as ".."), or it is all sentence-ending punctuation ("。。").
func lookalikeSegment(seg string) bool {
	if seg == "" || isASCII(seg) {
		return false
	}
	if strings.Trim(confusables.Skeleton(seg), `/\.`) == "" {
		return true
	}
	for _, r := range seg {
		if !unicode.Is(unicode.Terminal_Punctuation, r) {
			return false
		}
	}
	return true
}

// checkPath applies path safety and the allowed and denied globs to the
// action's target.
func (g *Gate) checkPath(a *meshtype.Action, c *collector) {
	t := a.Target
	if msg := targetProblem(t); msg != "" {
		c.add(ConstraintPathSafety, msg)
		return
	}
	clean := cleanTarget(t)
	switch a.Type {
	case meshtype.ActionRead, meshtype.ActionWrite, meshtype.ActionDelete:
		if t == "" {
			c.add(ConstraintPathSafety, fmt.Sprintf("%s needs a target path", a.Type))
			return
		}
		if clean == "." {
			c.add(ConstraintPathSafety, fmt.Sprintf("%s cannot target the workspace root", a.Type))
			return
		}
		if strings.HasSuffix(t, "/") {
			c.add(ConstraintPathSafety, fmt.Sprintf("%s target %q ends with /, which names a directory", a.Type, t))
			return
		}
	}
	g.checkGlobs(clean, c)
}

// PathDenied reports whether a workspace path (already clean) is refused by
// the denied globs or outside the allowed ones. Executors use it to leave
// such paths out of list and search results, which name paths the action's
// own target did not.
func (g *Gate) PathDenied(clean string) bool {
	if !g.allowedPath(clean) {
		return true
	}
	_, denied := deniedBy(g.denied, clean)
	return denied
}

// deniedBy returns the first of the denied globs that refuses a clean path.
// The action gate and the result gate share it, so a denied glob means the
// same in constraints and in result.
func deniedBy(denied []glob, clean string) (string, bool) {
	if len(denied) == 0 {
		return "", false
	}
	// Denied globs match case-insensitively and also against the compatibility
	// form, so ".ENV" or a full-width ".ｅｎｖ" is refused like ".env": failing
	// closed costs a rename, failing open leaks a secret on a case-folding
	// file system.
	lower := strings.ToLower(clean)
	forms := [2]string{lower, lower}
	if !isASCII(clean) {
		forms[1] = strings.ToLower(norm.NFKC.String(clean))
	}
	for _, gl := range denied {
		for i, f := range forms {
			if i == 1 && f == forms[0] {
				break
			}
			if matchPathOrParent(gl.lower, f) {
				return gl.pattern, true
			}
		}
	}
	return "", false
}

// allowedPath reports whether the allowed globs, if any, admit the path.
func (g *Gate) allowedPath(clean string) bool {
	if len(g.allowed) == 0 {
		return true
	}
	for _, gl := range g.allowed {
		if matchPathOrParent(gl.pattern, clean) {
			return true
		}
	}
	return false
}

// matchPathOrParent reports whether the pattern matches the path or one of its
// parent directories: as in .gitignore, a pattern naming a directory covers
// everything below it.
func matchPathOrParent(pattern, p string) bool {
	for {
		if ok, _ := doublestar.Match(pattern, p); ok {
			return true
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
