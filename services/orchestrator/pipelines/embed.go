// Package pipelines holds the orchestrator's built-in pipelines, embedded so
// that binaries carry them: one YAML file per pipeline at the root, and the
// system prompts they name under prompts/.
package pipelines

import (
	"embed"
	"io/fs"

	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

//go:embed *.yaml prompts
var files embed.FS

// FS returns the built-in pipelines' files.
func FS() fs.FS { return files }

// Load loads the built-in pipelines.
func Load() (*pipeline.Catalog, error) { return pipeline.LoadDir(files) }
