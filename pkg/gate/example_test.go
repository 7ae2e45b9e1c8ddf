package gate_test

import (
	"fmt"
	"strings"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshtype"
)

func Example() {
	def := &meshtype.Definition{
		ID:    "notes_v1",
		Tools: []string{"read", "write"},
		Constraints: meshtype.Constraints{
			MaxFileSize: 1_000_000, // "1MB"
			DeniedPaths: []string{"**/.env"},
			Rules: []meshtype.Rule{{
				ID:         "markdown_only",
				Expression: "action.type != 'write' || action.target.endsWith('.md')",
				Message:    "only Markdown files may be written",
			}},
		},
	}
	g, err := gate.Compile(def)
	if err != nil {
		panic(err)
	}

	write := &meshtype.Action{Type: meshtype.ActionWrite, Target: "notes.txt", Content: strings.Repeat("x", 2_000_000)}
	for _, v := range g.Evaluate(write, meshtype.JourneyState{}) {
		fmt.Printf("%s: %s\n", v.ConstraintID, v.Message)
	}
	read := &meshtype.Action{Type: meshtype.ActionRead, Target: "README.md"}
	fmt.Println("read README.md allowed:", g.Evaluate(read, meshtype.JourneyState{}) == nil)
	// Output:
	// max_file_size: File size 2000000 bytes exceeds limit 1000000 bytes
	// markdown_only: only Markdown files may be written
	// read README.md allowed: true
}

func ExampleGate_EvaluateResult() {
	def := &meshtype.Definition{
		ID:    "coder_v1",
		Tools: []string{"read", "write"},
		Result: meshtype.ResultConstraints{
			MaxChangedFiles: 10,
			MaxDiffBytes:    1_000_000, // "1MB"
			DeniedPaths:     []string{".github/**"},
			Rules: []meshtype.Rule{{
				ID:                "no_vendor",
				Expression:        "!result.files.exists(f, f.path.startsWith('vendor/'))",
				MessageExpression: "'vendored code is refused: ' + result.files.filter(f, f.path.startsWith('vendor/')).map(f, f.path).join(', ')",
			}},
		},
	}
	g, err := gate.Compile(def)
	if err != nil {
		panic(err)
	}

	change := &meshtype.ChangeSummary{
		Files: []meshtype.ChangedFile{
			{Path: "main.go", Status: meshtype.ChangeModified, LinesAdded: 3, LinesDeleted: 1},
			{Path: ".github/workflows/ci.yml", Status: meshtype.ChangeModified, LinesAdded: 1},
			{Path: "vendor/lib/lib.go", Status: meshtype.ChangeAdded, LinesAdded: 40},
		},
		FilesChanged: 12, // the summary's count wins when it is the larger
		DiffBytes:    4096,
	}
	for _, v := range g.EvaluateResult(change) {
		fmt.Printf("%s: %s\n", v.ConstraintID, v.Message)
	}
	small := &meshtype.ChangeSummary{Files: change.Files[:1], FilesChanged: 1, DiffBytes: 200}
	fmt.Println("main.go alone allowed:", g.EvaluateResult(small) == nil)
	// Output:
	// result.max_changed_files: the change touches 12 files; the limit is 10
	// result.denied_paths: change to ".github/workflows/ci.yml" is refused: it matches denied path ".github/**"
	// no_vendor: vendored code is refused: vendor/lib/lib.go
	// main.go alone allowed: true
}
