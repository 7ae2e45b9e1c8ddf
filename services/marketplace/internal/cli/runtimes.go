package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime/docker"
)

// newRuntimes builds the runtimes the configuration enables: Docker for
// container isolation, and the process runtime only when opted in.
func newRuntimes(ctx context.Context, cfg serveConfig, logger *slog.Logger) (map[meshtype.IsolationLevel]workerruntime.Runtime, error) {
	rts := map[meshtype.IsolationLevel]workerruntime.Runtime{}
	d, err := docker.NewFromEnv(ctx, logger)
	switch {
	case err == nil:
		rts[meshtype.IsolationContainer] = d
	case cfg.AllowProcessIsolation:
		logger.WarnContext(ctx, "no Docker engine: only process isolation is available", slog.Any("error", err))
	default:
		return nil, fmt.Errorf("connecting to the Docker engine (container isolation): %w", err)
	}
	if cfg.AllowProcessIsolation {
		p, err := newProcessRuntime(cfg, logger)
		if err != nil {
			return nil, err
		}
		rts[meshtype.IsolationProcess] = p
	}
	return rts, nil
}
