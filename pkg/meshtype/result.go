package meshtype

// ResultConstraints are what the result gate enforces on a workspace's change
// whenever it is asked to leave the worker (workspace_diff, export_workspace,
// stop_worker with workspace: patch): the gate on what leaves a worker, as
// Constraints are the gate on what enters it.
type ResultConstraints struct {
	MaxChangedFiles int64    `yaml:"max_changed_files,omitempty" json:"max_changed_files,omitempty" jsonschema:"most files a change may add, modify, delete or rename (0: no limit)"`
	MaxDiffBytes    ByteSize `yaml:"max_diff_bytes,omitempty" json:"max_diff_bytes,omitempty" jsonschema:"largest patch, in bytes, a change may produce (0: no limit)"`
	DeniedPaths     []string `yaml:"denied_paths,omitempty" json:"denied_paths,omitempty" jsonschema:"globs anchored at the workspace root; a change to a matching path (either side of a rename) is refused"`
	Rules           []Rule   `yaml:"rules,omitempty" json:"rules,omitempty" jsonschema:"user rules in CEL over result (the change summary); true allows the change"`
}

// ChangeStatus says what a change did to one path.
type ChangeStatus string

// The change statuses.
const (
	ChangeAdded    ChangeStatus = "added"
	ChangeModified ChangeStatus = "modified"
	ChangeDeleted  ChangeStatus = "deleted"
	ChangeRenamed  ChangeStatus = "renamed"
)

// ChangedFile is one path a change touches.
//
// The JSON names double as the field names CEL result rules see
// (result.files.exists(f, f.path.startsWith('vendor/'))).
type ChangedFile struct {
	// Path is the path after the change, relative to the workspace root (the
	// old path for a deletion).
	Path string `json:"path"`
	// OldPath is the path before a rename; empty otherwise.
	OldPath string       `json:"old_path,omitempty"`
	Status  ChangeStatus `json:"status"`
	// Binary is set for content a text diff cannot show: a NUL byte in
	// its first 8,000 bytes, or not UTF-8. The patch carries it in git's
	// binary form, unless it is Omitted.
	Binary bool `json:"binary,omitempty"`
	// Omitted is set for a file whose content the patch does not carry
	// (over 4 MiB on either side): it is listed, and the tar and the
	// bundle carry it.
	Omitted      bool  `json:"omitted,omitempty"`
	LinesAdded   int64 `json:"lines_added"`
	LinesDeleted int64 `json:"lines_deleted"`
	// Mode is the file's git mode after the change ("100644", "100755",
	// "120000" for a symbolic link); the old mode for a deletion.
	Mode string `json:"mode,omitempty"`
	// LinkTarget is a symbolic link's target after the change.
	LinkTarget string `json:"link_target,omitempty"`
}

// ChangeSummary is what a workspace's change against its base amounts to.
// The result gate sees it as `result`.
type ChangeSummary struct {
	Files        []ChangedFile `json:"files"`
	FilesChanged int64         `json:"files_changed"`
	Added        int64         `json:"added"`
	Modified     int64         `json:"modified"`
	Deleted      int64         `json:"deleted"`
	Renamed      int64         `json:"renamed"`
	LinesAdded   int64         `json:"lines_added"`
	LinesDeleted int64         `json:"lines_deleted"`
	// Binary lists the paths of the binary files among Files.
	Binary []string `json:"binary,omitempty"`
	// Omitted lists the paths of the files whose content the patch does
	// not carry.
	Omitted []string `json:"omitted,omitempty"`
	// DiffBytes is the size of the patch.
	DiffBytes int64 `json:"diff_bytes"`
	// Digest is the SHA-256 of the whole workspace the change was taken
	// from (each file's path, mode and content, private files aside):
	// two summaries with the same digest hold the same change, files the
	// patch leaves out included.
	Digest string `json:"digest,omitempty"`
}

// Summarize counts files into a change summary whose patch is diffBytes
// long: one place decides what a summary's counts are.
func Summarize(files []ChangedFile, diffBytes int64) ChangeSummary {
	s := ChangeSummary{Files: files, FilesChanged: int64(len(files)), DiffBytes: diffBytes}
	if s.Files == nil {
		s.Files = []ChangedFile{}
	}
	for _, f := range files {
		switch f.Status {
		case ChangeAdded:
			s.Added++
		case ChangeModified:
			s.Modified++
		case ChangeDeleted:
			s.Deleted++
		case ChangeRenamed:
			s.Renamed++
		}
		if f.Binary {
			s.Binary = append(s.Binary, f.Path)
		}
		if f.Omitted {
			s.Omitted = append(s.Omitted, f.Path)
		}
		s.LinesAdded += f.LinesAdded
		s.LinesDeleted += f.LinesDeleted
	}
	return s
}
