package workerdef_test

import (
	"fmt"
	"testing/fstest"

	"github.com/meshwork/meshwork/pkg/workerdef"
)

func ExampleLoad() {
	fsys := fstest.MapFS{
		"base.yaml":     {Data: []byte("id: fs_base_v1\nabstract: true\nkind: builtin\nimage: meshwork/worker:latest\nconstraints: {max_file_size: 1MB, readonly: true}\n")},
		"research.yaml": {Data: []byte("id: research_v1\nextends: fs_base_v1\nname: Research\ntools: [read, list]\n")},
	}
	cat, err := workerdef.Load(fsys)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range cat.Entries() {
		d := e.Definition
		fmt.Println(d.ID, d.Kind, d.Tools, d.Constraints.MaxFileSize, d.Constraints.Readonly, d.Isolation.Network)
	}

	fsys["broken.yaml"] = &fstest.MapFile{Data: []byte("id: broken_v1\nextends: research_v1\nconstraints:\n  max_file_sise: 2MB\n")}
	_, err = workerdef.Load(fsys)
	fmt.Println(err)
	// Output:
	// research_v1 builtin [read list] 1MB true none
	// broken.yaml:4:3: unknown field "max_file_sise" in constraints (did you mean "max_file_size"?)
}
