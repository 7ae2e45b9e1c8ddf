package meshworker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

// The worker's path globs are the definition's allowed_paths and
// denied_paths. The gate checks them on the path an action names; os.Root
// follows symbolic links that stay inside the workspace, so a link such as
// "notes.md -> .env", made by a command or an agent, would reach a denied
// file under an allowed name. Here they are checked again on the path a
// request really resolves to.
//
// The check runs before the operation, so a link swapped in between by a
// concurrent command is not seen, and a hard link to a denied file is a
// file like any other: the globs name paths, not files.

// maxLinkHops is the most symbolic links one path may pass through: Linux's
// MAXSYMLINKS, after which open fails with ELOOP.
const maxLinkHops = 40

var (
	errLinkLoop = errors.New("too many levels of symbolic links")
	errEscapes  = errors.New("path escapes from the workspace")
)

// pathPolicy is the compiled form of the path globs.
type pathPolicy struct {
	// all holds every glob: a path it denies is refused or left out.
	all *gate.Gate
	// denied holds the denied globs only, or is nil. A directory it denies
	// has every path below it denied too, so walks do not enter it; a
	// directory outside the allowed globs may still hold allowed files.
	denied *gate.Gate
}

// newPathPolicy compiles the globs with the gate's own matcher, so the
// worker and the gate agree on what a pattern means. It returns nil when
// there are no globs: every path is allowed, and nothing is resolved.
func newPathPolicy(allowed, denied []string) (*pathPolicy, error) {
	if len(allowed) == 0 && len(denied) == 0 {
		return nil, nil
	}
	compile := func(allowed, denied []string) (*gate.Gate, error) {
		return gate.Compile(&meshtype.Definition{ID: "meshworker_v1", Constraints: meshtype.Constraints{AllowedPaths: allowed, DeniedPaths: denied}})
	}
	all, err := compile(allowed, denied)
	if err != nil {
		return nil, fmt.Errorf("compiling the path globs: %w", err)
	}
	p := &pathPolicy{all: all}
	if len(denied) > 0 {
		if p.denied, err = compile(nil, denied); err != nil {
			return nil, fmt.Errorf("compiling the path globs: %w", err)
		}
	}
	return p, nil
}

// guard refuses p, a path as the caller gave it, when this worker may not
// access it: when the path as asked, or the path it resolves to after the
// symbolic links on the way (and at the end, with followLast), is outside
// the allowed globs or inside a denied one. It returns the resolved path,
// or "" when the worker has no globs. A resolution failure (a link loop, a
// link leading out) is an error of op; a refusal names the two paths and
// nothing else, not the glob.
func (w *worker) guard(op, p string, followLast bool) (string, error) {
	if w.policy == nil {
		return "", nil
	}
	asked := display(p)
	if w.policy.all.PathDenied(asked) {
		return "", fmt.Errorf("this worker may not access path %q", asked)
	}
	resolved, err := w.resolve(p, followLast)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", op, p, err)
	}
	if w.policy.all.PathDenied(resolved) {
		return "", fmt.Errorf("path %q resolves to %q, which this worker may not access", asked, resolved)
	}
	return resolved, nil
}

// hidden reports whether a walk leaves an entry out of its results: when
// its path as shown or its real path is denied, or, for a symbolic link,
// when what the link resolves to is denied or cannot be resolved inside
// the workspace.
func (w *worker) hidden(disp, resolved string, d fs.DirEntry) bool {
	if w.policy.all.PathDenied(disp) || (resolved != disp && w.policy.all.PathDenied(resolved)) {
		return true
	}
	if d.Type()&fs.ModeSymlink == 0 {
		return false
	}
	target, err := w.resolve(resolved, true)
	return err != nil || w.policy.all.PathDenied(target)
}

// pruned reports whether a walk need not enter a directory: the denied
// globs deny it, and so everything below it.
func (w *worker) pruned(disp, resolved string) bool {
	d := w.policy.denied
	return d != nil && (d.PathDenied(disp) || (resolved != disp && d.PathDenied(resolved)))
}

// resolve returns the real path p names in the workspace: slash-separated,
// relative, without "." or ".." segments, "." for the root. It walks p one
// component at a time with Lstat and follows every symbolic link on the way
// (and the last component's too, with followLast), as the kernel and
// os.Root do: a relative target is resolved against the link's directory,
// ".." after following links. An absolute target, or one that leaves the
// workspace, is refused, as os.Root refuses it.
//
// Once a component does not exist (a write creating directories) or cannot
// be looked at, the rest of the path cannot pass through a link and is
// resolved lexically: the operation itself creates it or fails there too.
func (w *worker) resolve(p string, followLast bool) (string, error) {
	var comps []string // resolved so far; none of them is a link
	rest := splitPath(p)
	hops := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		if name == ".." {
			if len(comps) == 0 {
				return "", errEscapes
			}
			comps = comps[:len(comps)-1]
			continue
		}
		if len(rest) == 0 && !followLast {
			comps = append(comps, name)
			break
		}
		cur := strings.Join(append(comps[:len(comps):len(comps)], name), "/")
		fi, err := w.root.Lstat(cur)
		if err != nil {
			return lexicalJoin(comps, append([]string{name}, rest...))
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			comps = append(comps, name)
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", errLinkLoop
		}
		target, err := w.root.Readlink(cur)
		if err != nil {
			return "", fmt.Errorf("reading a symbolic link: %w", unwrapPath(err))
		}
		if target == "" || filepath.IsAbs(target) {
			return "", errEscapes
		}
		rest = append(splitPath(target), rest...)
	}
	return lexicalJoin(comps, nil)
}

// lexicalJoin appends the components rest to the resolved comps without
// looking at the file system: ".." drops the last one.
func lexicalJoin(comps, rest []string) (string, error) {
	for _, name := range rest {
		if name != ".." {
			comps = append(comps, name)
			continue
		}
		if len(comps) == 0 {
			return "", errEscapes
		}
		comps = comps[:len(comps)-1]
	}
	if len(comps) == 0 {
		return ".", nil
	}
	return strings.Join(comps, "/"), nil
}

// splitPath splits a slash-separated path into its components, dropping
// empty and "." ones; ".." is kept for resolve to apply.
func splitPath(p string) []string {
	parts := strings.Split(filepath.ToSlash(p), "/")
	out := parts[:0]
	for _, s := range parts {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}

// unwrapPath drops the path from a *fs.PathError: the path resolve looked at
// is the resolved one, which a refusal must not reveal beyond its message.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkOpened checks the file actually opened for p, not the name asked
// for: the name was checked before the open, and code in the worker can
// swap a link in between, or have made a hard link to a denied file under
// an allowed name. With a path policy, a regular file is read only when its
// real path, as the kernel names the open descriptor, is allowed, and when
// it has no other name (a hard link's other name could be a denied file).
func (w *worker) checkOpened(p string, f *os.File, fi fs.FileInfo) error {
	if w.policy == nil {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return fmt.Errorf("%s has %d hard links; this worker reads no file with more than one name (another could be a denied file)", display(p), st.Nlink)
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("checking what %s opened: %w", display(p), err) // fail closed
	}
	rel, err := filepath.Rel(w.realRoot, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s opened %s, outside the workspace", display(p), real)
	}
	if opened := filepath.ToSlash(rel); w.policy.all.PathDenied(opened) {
		return fmt.Errorf("path %q opened %q, which this worker may not access", display(p), opened)
	}
	return nil
}
