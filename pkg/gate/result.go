package gate

import (
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/pkg/gitpath"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// Built-in result constraint ids, as reported in Violation.ConstraintID by
// [Gate.EvaluateResult]. The dot keeps them apart from the action gate's ids
// and from user rule ids, which cannot contain one.
const (
	ConstraintResultMaxChangedFiles = "result.max_changed_files"
	ConstraintResultMaxDiffBytes    = "result.max_diff_bytes"
	ConstraintResultDenied          = "result.denied_paths"
	ConstraintResultPathSafety      = "result.path_safety"
)

var resultBuiltinIDs = []string{
	ConstraintResultMaxChangedFiles, ConstraintResultMaxDiffBytes, ConstraintResultDenied, ConstraintResultPathSafety,
}

// resultGate is the compiled form of a definition's result block.
type resultGate struct {
	maxChangedFiles int64
	maxDiffBytes    int64
	denied          []glob
	rules           []*rule
}

// compileResult compiles a result block. The action gate's denied globs
// (constraints.denied_paths) apply to changes too: a path a worker may not
// touch through its actions is not one its change may carry out either
// (agents and commands write files without passing through the gate).
func compileResult(rc *meshtype.ResultConstraints, constraintsDenied []glob) (resultGate, error) {
	r := resultGate{maxChangedFiles: rc.MaxChangedFiles, maxDiffBytes: int64(rc.MaxDiffBytes)}
	var err error
	if r.denied, err = compileGlobs("result.denied_paths", rc.DeniedPaths); err != nil {
		return resultGate{}, err
	}
	r.denied = append(r.denied, constraintsDenied...)
	if r.rules, err = resultRules.compile(rc.Rules); err != nil {
		return resultGate{}, err
	}
	return r, nil
}

// EvaluateResult checks a workspace's change against the definition's result
// block, the gate on what leaves a worker, and returns all the violations, or
// nil when the change may leave. Like [Gate.Evaluate] it does no I/O and is
// safe for concurrent use.
//
// It checks the number of changed files (the larger of FilesChanged and
// len(Files), so a summary cannot undercount), the patch size, every changed
// path (and the old path of a rename) against lexical path safety and the
// denied globs, which mean what constraints.denied_paths means, and the user
// rules, which see the summary as `result`.
func (g *Gate) EvaluateResult(c *meshtype.ChangeSummary) []meshtype.Violation {
	var col collector
	r := &g.result
	files := max(c.FilesChanged, int64(len(c.Files)))
	if r.maxChangedFiles > 0 && files > r.maxChangedFiles {
		col.add(ConstraintResultMaxChangedFiles, fmt.Sprintf("the change touches %d files; the limit is %d", files, r.maxChangedFiles))
	}
	if r.maxDiffBytes > 0 {
		switch {
		case c.DiffBytes < 0:
			// An unknown size is not a small one.
			col.add(ConstraintResultMaxDiffBytes, fmt.Sprintf("the patch size is unknown (%d bytes); the limit is %d bytes", c.DiffBytes, r.maxDiffBytes))
		case c.DiffBytes > r.maxDiffBytes:
			col.add(ConstraintResultMaxDiffBytes, fmt.Sprintf("the patch is %d bytes; the limit is %d bytes", c.DiffBytes, r.maxDiffBytes))
		}
	}
	for i := range c.Files {
		f := &c.Files[i]
		r.checkChangedPath(f.Path, "", &col)
		switch {
		case f.OldPath != "" && f.OldPath != f.Path:
			r.checkChangedPath(f.OldPath, f.Path, &col)
		case f.OldPath == "" && f.Status == meshtype.ChangeRenamed:
			col.add(ConstraintResultPathSafety, fmt.Sprintf("the rename to %q does not say where it is from (no old_path)", f.Path))
		}
		if f.LinkTarget != "" && linkLeaves(f.Path, f.LinkTarget) {
			col.add(ConstraintResultPathSafety, fmt.Sprintf("change to %q is refused: it is a symbolic link to %q, outside the workspace", f.Path, f.LinkTarget))
		}
	}
	linkProblems(c.Files, &col)
	if len(r.rules) > 0 {
		// Rules see the same file count the limit was checked against.
		s := *c
		s.FilesChanged = files
		in := resultInput{result: &s}
		for _, rl := range r.rules {
			if msg, ok := rl.eval(&in); !ok {
				col.add(rl.id, msg)
			}
		}
	}
	return col.vs
}

// checkChangedPath applies lexical path safety and the denied globs to one
// side of a change: p is the path after the change, or, when renamedTo is
// set, the path a rename moved away from.
func (r *resultGate) checkChangedPath(p, renamedTo string, c *collector) {
	what := fmt.Sprintf("change to %q", p)
	if renamedTo != "" {
		what = fmt.Sprintf("rename of %q to %q", p, renamedTo)
	}
	if msg := changedPathProblem(p); msg != "" {
		c.add(ConstraintResultPathSafety, fmt.Sprintf("%s is refused: %s", what, msg))
		return
	}
	if gl, ok := deniedBy(r.denied, p); ok {
		c.add(ConstraintResultDenied, fmt.Sprintf("%s is refused: it matches denied path %q", what, gl))
	}
}

// linkLeaves reports whether a symbolic link at p to target points outside
// the workspace, lexically: absolute, or climbing above the root from p's
// directory. A patch carrying one would plant it in the user's checkout.
func linkLeaves(p, target string) bool {
	if strings.HasPrefix(target, "/") {
		return true
	}
	depth := strings.Count(p, "/") // p's directory's depth below the root
	for seg := range strings.SplitSeq(target, "/") {
		switch seg {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// changedPathProblem returns why a changed path is unsafe, or "". On top of
// the action targets' lexical checks, a changed path must name a file below
// the root, written in the canonical form a patch carries: the globs are
// matched against exactly the path that leaves.
func changedPathProblem(p string) string {
	if msg := targetProblem(p); msg != "" {
		return msg
	}
	switch clean := cleanTarget(p); {
	case p == "":
		return "the path is empty"
	case clean == ".":
		return "the path names the workspace root"
	case clean != p:
		return fmt.Sprintf("the path is not in canonical form (%q)", clean)
	case strings.HasPrefix(p, `"`):
		// git reads a name that starts with one as C-quoted (a rename's
		// "rename from" line has no a/ before it): the patch would write
		// another path than the one judged here.
		return "the path starts with a double quote, which git reads as a quoted name in a patch"
	case gitpath.HasDotGit(p):
		return "the path is in a .git directory, as git names it on some file system (such as .git. or GIT~1)"
	}
	return ""
}

// linkProblems finds the changes a patch would write through a symbolic
// link it makes itself, on the file systems where letter case does not
// count (X -> .git, then x/hooks/post-checkout): git checks a path
// against the links the patch makes with their case, so the write would
// land behind the link. Links into a .git directory are refused as such.
func linkProblems(files []meshtype.ChangedFile, col *collector) {
	links := map[string]string{} // by lower-case path
	for i := range files {
		f := &files[i]
		if f.LinkTarget == "" || f.Status == meshtype.ChangeDeleted {
			continue
		}
		links[strings.ToLower(f.Path)] = f.Path
		if gitpath.HasDotGit(f.LinkTarget) {
			col.add(ConstraintResultPathSafety, fmt.Sprintf("change to %q is refused: it is a symbolic link into a .git directory (%q)", f.Path, f.LinkTarget))
		}
	}
	if len(links) == 0 {
		return
	}
	for i := range files {
		f := &files[i]
		if f.Status == meshtype.ChangeDeleted {
			continue
		}
		lower := strings.ToLower(f.Path)
		for j := strings.IndexByte(lower, '/'); j >= 0; j = nextSlash(lower, j) {
			if link, ok := links[lower[:j]]; ok {
				col.add(ConstraintResultPathSafety, fmt.Sprintf("change to %q is refused: it would be written through the symbolic link %q the change makes (letter case does not count on some file systems)", f.Path, link))
				break
			}
		}
	}
}

// nextSlash is the index of the first "/" in s after i, or -1.
func nextSlash(s string, i int) int {
	k := strings.IndexByte(s[i+1:], '/')
	if k < 0 {
		return -1
	}
	return i + 1 + k
}
