package cli

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/meshwork/meshwork/services/marketplace/internal/journeys"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/process"
)

// newProcessRuntime builds the process runtime: meshworker as a plain
// subprocess per journey, confined only to its workspace directory.
func newProcessRuntime(cfg serveConfig, logger *slog.Logger) (workerruntime.Runtime, error) {
	bin := cfg.Meshworker
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(filepath.Dir(self), "meshworker")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("process isolation needs the meshworker binary (--meshworker): %w", err)
	}
	dir := cfg.ProcessStateDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "meshwork-process")
	}
	return process.New(process.Config{StateDir: dir, Binaries: map[string]string{journeys.MeshworkerPath: bin}}, logger)
}
