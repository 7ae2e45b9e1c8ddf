package console

import (
	"strconv"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// sideDiff is a patch laid out side by side: for each file, its rows, the
// old text on the left and the new on the right, a line removed beside the
// line that replaced it.
type sideDiff struct {
	Files []sideFile
	// Cut is set when the patch had more rows than are shown; the rest is
	// in the .patch download.
	Cut bool
}

type sideFile struct {
	Name   string // the new name, or the old one of a deleted file
	Change string // added, deleted, renamed from …, modified
	Binary bool
	// Added and Removed count the file's lines added and removed, shown
	// or not.
	Added, Removed int64
	Rows           []sideRow
}

// sideRow is one row: Kind is "hunk" (a hunk's header, in Old), "same",
// "changed" (a line removed beside the one added in its place), "removed"
// or "added" (one side empty).
type sideRow struct {
	Kind         string
	OldNo, NewNo string
	Old, New     string
}

// maxSideRows bounds the rows a page shows of a patch.
const maxSideRows = 5000

// sideBySide lays patch out side by side. A patch that does not parse (it
// is an agent's output, whatever it claims) is an error: the page then
// shows it as text only.
func sideBySide(patch string) (*sideDiff, error) {
	files, _, err := gitdiff.Parse(strings.NewReader(patch))
	if err != nil {
		return nil, err
	}
	d := &sideDiff{}
	rows := 0
	for _, f := range files {
		if rows >= maxSideRows {
			d.Cut = true
			break
		}
		sf := sideFile{Name: f.NewName, Change: "modified", Binary: f.IsBinary}
		switch {
		case f.IsNew:
			sf.Change = "added"
		case f.IsDelete:
			sf.Name, sf.Change = f.OldName, "deleted"
		case f.IsRename:
			sf.Change = "renamed from " + f.OldName
		case f.IsCopy:
			sf.Change = "copied from " + f.OldName
		}
		for _, frag := range f.TextFragments {
			sf.Added += frag.LinesAdded
			sf.Removed += frag.LinesDeleted
		}
		for _, frag := range f.TextFragments {
			if rows >= maxSideRows {
				d.Cut = true
				break
			}
			fr := fragmentRows(frag)
			if room := maxSideRows - rows - 1; len(fr) > room {
				fr, d.Cut = fr[:max(room, 0)], true
			}
			sf.Rows = append(sf.Rows, sideRow{Kind: "hunk", Old: strings.TrimSuffix(frag.Header(), "\n")})
			sf.Rows = append(sf.Rows, fr...)
			rows += 1 + len(fr)
		}
		d.Files = append(d.Files, sf)
	}
	return d, nil
}

// fragmentRows pairs a fragment's lines: context on both sides, and each
// run of removed lines beside the run of added lines that follows it.
func fragmentRows(frag *gitdiff.TextFragment) []sideRow {
	var rows []sideRow
	oldNo, newNo := frag.OldPosition, frag.NewPosition
	var removed, added []string
	flush := func() {
		for i := 0; i < max(len(removed), len(added)); i++ {
			r := sideRow{Kind: "changed"}
			if i < len(removed) {
				r.OldNo, r.Old = strconv.FormatInt(oldNo, 10), removed[i]
				oldNo++
			} else {
				r.Kind = "added"
			}
			if i < len(added) {
				r.NewNo, r.New = strconv.FormatInt(newNo, 10), added[i]
				newNo++
			} else {
				r.Kind = "removed"
			}
			rows = append(rows, r)
		}
		removed, added = removed[:0], added[:0]
	}
	for _, l := range frag.Lines {
		text := strings.TrimSuffix(l.Line, "\n")
		switch l.Op {
		case gitdiff.OpDelete:
			if len(added) > 0 { // a removal after additions starts a new run
				flush()
			}
			removed = append(removed, text)
		case gitdiff.OpAdd:
			added = append(added, text)
		default:
			flush()
			rows = append(rows, sideRow{Kind: "same", OldNo: strconv.FormatInt(oldNo, 10), NewNo: strconv.FormatInt(newNo, 10), Old: text, New: text})
			oldNo++
			newNo++
		}
	}
	flush()
	return rows
}
