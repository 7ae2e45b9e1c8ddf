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
