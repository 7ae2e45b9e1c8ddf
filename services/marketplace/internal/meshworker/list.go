package meshworker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
)

const defaultMaxEntries = 1000

type listIn struct {
	Path       string `json:"path,omitempty" jsonschema:"directory relative to the workspace root (default: the root)"`
	Recursive  bool   `json:"recursive,omitempty" jsonschema:"list subdirectories too (default false); symbolic links are never followed"`
	MaxEntries int    `json:"max_entries,omitempty" jsonschema:"the most entries returned (default 1000)"`
}

type listEntry struct {
	Path string `json:"path" jsonschema:"path relative to the workspace root, slash-separated"`
	Type string `json:"type" jsonschema:"file, dir, symlink, or other (device, FIFO, socket)"`
	Size int64  `json:"size" jsonschema:"size in bytes (0 for directories; the target's length for symlinks)"`
}

type listOut struct {
	Entries   []listEntry `json:"entries" jsonschema:"the entries, sorted by path"`
	Truncated bool        `json:"truncated" jsonschema:"true when more entries exist than max_entries"`
}

func (w *worker) list(ctx context.Context, in listIn) (listOut, error) {
	p, err := relPath(in.Path, true)
	if err != nil {
		return listOut{}, err
	}
	limit, err := countLimit("max_entries", in.MaxEntries, defaultMaxEntries)
	if err != nil {
		return listOut{}, err
	}
	resolved, err := w.guard("list", p, true)
	if err != nil {
		return listOut{}, err
	}
	out := listOut{Entries: []listEntry{}}
	err = w.walk(ctx, p, resolved, walkOptions{recursive: in.Recursive}, func(_, disp string, d fs.DirEntry) error {
		if len(out.Entries) == limit {
			out.Truncated = true
			return errStopWalk
		}
		out.Entries = append(out.Entries, entryOf(disp, d))
		return nil
	})
	if err != nil {
		return listOut{}, fmt.Errorf("list %s: %w", p, err)
	}
	return out, nil
}

func entryOf(disp string, d fs.DirEntry) listEntry {
	e := listEntry{Path: disp}
	switch t := d.Type(); {
	case t.IsDir():
		e.Type = "dir"
		return e
	case t&fs.ModeSymlink != 0:
		e.Type = "symlink"
	case t.IsRegular():
		e.Type = "file"
	default:
		e.Type = "other"
	}
	// Info is an lstat: a link's own size, never its target's.
	if fi, err := d.Info(); err == nil {
		e.Size = fi.Size()
	}
	return e
}

// errStopWalk ends a walk early without an error.
var errStopWalk = errors.New("stop walking")

type walkOptions struct {
	recursive bool
	// skipDir names directories a recursive walk does not enter.
	skipDir func(name string) bool
}

// walk calls fn for every entry below the directory dir, in ascending order
// of their slash-separated paths, without following symbolic links. fn gets
// the path to open the entry with (dir as given plus entry names, so the
// root resolves it exactly as it resolved dir) and the path to show.
//
// With path globs, resolved is the path dir resolves to (from guard), and
// entries the worker may not access are left out: fn never sees them.
func (w *worker) walk(ctx context.Context, dir, resolved string, opts walkOptions, fn func(open, disp string, d fs.DirEntry) error) error {
	err := w.walkDir(ctx, dir, display(dir), resolved, opts, fn, true)
	if errors.Is(err, errStopWalk) {
		return nil
	}
	return err
}

func (w *worker) walkDir(ctx context.Context, dir, disp, resolved string, opts walkOptions, fn func(open, disp string, d fs.DirEntry) error, top bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := w.root.Open(dir)
	if err != nil {
		if top {
			return err
		}
		// A subdirectory that vanished or is unreadable must not lose the
		// rest of the listing.
		w.logger.WarnContext(ctx, "skipping unreadable directory", slog.String("path", disp), slog.Any("error", err))
		return nil
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		if top {
			return err
		}
		w.logger.WarnContext(ctx, "skipping unreadable directory", slog.String("path", disp), slog.Any("error", err))
		return nil
	}

	// A directory's subtree sorts by "name/...", which can come after a
	// sibling such as "name.txt" ('.' < '/'). Sorting each directory's own
	// entry by "name" and its subtree by "name/" yields the global path order
	// one directory at a time, so a capped listing is the true first N.
	type item struct {
		key     string
		d       fs.DirEntry
		descend bool
	}
	items := make([]item, 0, len(entries))
	for _, d := range entries {
		items = append(items, item{key: d.Name(), d: d})
		if opts.recursive && d.IsDir() && (opts.skipDir == nil || !opts.skipDir(d.Name())) {
			items = append(items, item{key: d.Name() + "/", d: d, descend: true})
		}
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.key, b.key) })
	for _, it := range items {
		open, show := join(dir, it.d.Name()), join(disp, it.d.Name())
		// A walk enters no link, so an entry's resolved path is its
		// directory's and its name. A directory outside the allowed globs
		// is left out but still entered: files below it may be allowed.
		var rpath string
		if w.policy != nil {
			rpath = join(resolved, it.d.Name())
			if (it.descend && w.pruned(show, rpath)) || (!it.descend && w.hidden(show, rpath, it.d)) {
				continue
			}
		}
		if it.descend {
			err = w.walkDir(ctx, open, show, rpath, opts, fn, false)
		} else {
			err = fn(open, show, it.d)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
