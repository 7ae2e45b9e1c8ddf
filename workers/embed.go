package workers

import (
	"embed"
	"io/fs"

	"github.com/meshwork/meshwork/pkg/workerdef"
)

//go:embed *.yaml prompts worker.schema.json
var files embed.FS

// FS returns the catalog's files: the definitions at the root, prompts/ and
// worker.schema.json.
func FS() fs.FS { return files }

// Load loads the embedded catalog.
func Load() (*workerdef.Catalog, error) { return workerdef.Load(files) }

// Schema returns the committed JSON Schema of the definition format.
func Schema() []byte {
	b, err := files.ReadFile("worker.schema.json")
	if err != nil {
		panic("workers: schema missing from the embedded catalog: " + err.Error())
	}
	return b
}
