package engine

// Taking a node's workspace out whole: the marketplace journey its change
// was made in, as a git bundle or a tar, files too large for a patch
// included.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

// WorkspaceFormats are the formats ExportWorkspace takes: a git bundle of
// one commit on the source's commit (a git source only, and the default),
// or a tar of the workspace's files.
var WorkspaceFormats = []string{"bundle", "tar"}

// WorkspaceExport is a node's workspace, taken out.
type WorkspaceExport struct {
	RunID, NodeID string
	// Journey is the marketplace journey whose workspace it is.
	Journey string
	Format  string
	Content []byte
	// SHA256 is Content's hex digest; Commit, for a bundle, the commit it
	// holds as refs/heads/meshwork.
	SHA256, Commit string
}

// maxExports bounds the workspace exports a replica makes at once: each
// holds its content in memory (up to 32 MiB, and its base64 on the way).
const maxExports = 4

// ExportWorkspace takes out the workspace that holds node's change in run
// runID: the journey the node's latest succeeded attempt of its current
// iteration worked in (in a fork, maybe that of a run it was forked from),
// as the orchestrator recorded it, never as the run's state says. The
// workspace must still be as that attempt left it (the digest of its
// files, those too large for a patch included, taken with the export):
// once a later attempt in the same journey (a later node of the role, a
// later run on the thread) changed it, the export is refused as a conflict
// rather than handing over another change under the node's name. An empty
// format is the default, a bundle.
//
// deliver is given the export to write out; its error is ExportWorkspace's.
// The export keeps its place among the replica's maxExports until deliver
// returns: an HTTP download's place is held until it is written (and a
// client too slow to take it is cut off: slowclient), so slow clients hold
// places, not more memory.
func (e *Engine) ExportWorkspace(ctx context.Context, runID, nodeID, format string, deliver func(WorkspaceExport) error) error {
	if format == "" {
		format = WorkspaceFormats[0]
	}
	if !slices.Contains(WorkspaceFormats, format) {
		return invalid("format %q is not one of %s", format, strings.Join(WorkspaceFormats, ", "))
	}
	run, err := e.loadVisible(ctx, runID)
	if err != nil {
		return err
	}
	p, ok := e.catalog.Lookup(run.Pipeline)
	if !ok {
		return fmt.Errorf("pipeline %q of run %s is no longer in the catalog: %w", run.Pipeline, run.ID, ErrNotFound)
	}
	n, ok := p.Node(nodeID)
	if !ok {
		return invalid("run %s: pipeline %s has no node %q", run.ID, run.Pipeline, nodeID)
	}
	role, _ := p.Role(nodeID)
	switch {
	case p.Source(nodeID) == nil:
		return invalid("run %s: node %s works on no repository (it has no source), so it has no workspace to export", run.ID, nodeID)
	case role.Via != pipeline.ViaMarketplace:
		return invalid("run %s: node %s works via %s, which keeps no workspace to export", run.ID, nodeID, role.Via)
	case n.IsForeach():
		return invalid("run %s: node %s is a foreach node, whose items each work in a journey of their own: there is no one workspace to export", run.ID, nodeID)
	}
	st, err := store.LoadState(ctx, e.pool, run.ID, run.HeadSeq)
	if err != nil {
		return err
	}
	ns := st.Node(nodeID)
	if ns.Status != pipeline.StatusSucceeded {
		return fmt.Errorf("%w: run %s: node %s has no change yet (it is %s)", ErrConflict, run.ID, nodeID, cmp.Or(ns.Status, pipeline.StatusPending))
	}
	journey, digest, err := store.NodeJourney(ctx, e.pool, run.ID, nodeID, ns.Iteration)
	if err != nil {
		return err
	}
	if journey == "" || digest == "" {
		return fmt.Errorf("%w: run %s: no journey is recorded for node %s's change (it was made before the orchestrator recorded them); take its patch instead", ErrConflict, run.ID, nodeID)
	}
	ex, ok := e.cfg.Executors[pipeline.ViaMarketplace].(executor.Exporter)
	if !ok {
		return fmt.Errorf("%w: node %s worked in marketplace journey %s; start the orchestrator with --marketplace-url", executor.ErrUnavailable, nodeID, journey)
	}
	select {
	case e.exports <- struct{}{}:
		defer func() { <-e.exports }()
	default:
		return fmt.Errorf("%w: %d workspace exports are under way on this replica; try again in a moment", ErrBusy, maxExports)
	}
	out, err := ex.Export(ctx, journey, format)
	if err != nil {
		return e.exportError(ctx, run.ID, nodeID, journey, err)
	}
	if out.Digest != digest {
		return fmt.Errorf("%w: run %s: the workspace of node %s (journey %s) has moved on since: a later attempt in it (a later node of role %s, or a later run on thread %s) changed it, so it no longer holds that node's change; its patch still does",
			ErrConflict, run.ID, nodeID, journey, n.Role, run.Thread)
	}
	return deliver(WorkspaceExport{RunID: run.ID, NodeID: nodeID, Journey: journey, Format: format, Content: out.Content, SHA256: out.SHA256, Commit: out.Commit})
}

// exportError is the engine's error for an Exporter's failure: the
// marketplace's refusals keep their meaning (and message) for the caller;
// a marketplace that did not answer is unavailable, with its cause logged
// (it names addresses); anything else is internal.
func (e *Engine) exportError(ctx context.Context, runID, nodeID, journey string, err error) error {
	if errors.Is(err, executor.ErrUnreachable) {
		e.logger.WarnContext(ctx, "exporting a workspace: the marketplace did not answer", slog.String("run", runID), slog.String("node", nodeID), slog.String("journey", journey), slog.Any("error", err))
		return fmt.Errorf("%w: the marketplace did not answer the export of node %s of run %s; try again later", ErrUnavailable, nodeID, runID)
	}
	me, ok := meshapi.AsError(err)
	if !ok {
		return fmt.Errorf("exporting the workspace of node %s of run %s (journey %s): %w", nodeID, runID, journey, err)
	}
	switch me.Code {
	case meshapi.CodeNotFound:
		return fmt.Errorf("run %s: the workspace of node %s (journey %s) is gone (%s): %w", runID, nodeID, journey, me.Message, ErrNotFound)
	case meshapi.CodeInvalidArgument:
		return invalid("run %s: node %s (journey %s): %s", runID, nodeID, journey, me.Message)
	case meshapi.CodePermissionDenied:
		return fmt.Errorf("%w: run %s: node %s (journey %s): %s", ErrForbidden, runID, nodeID, journey, me.Message)
	case meshapi.CodeUnavailable, meshapi.CodeResourceExhausted:
		return fmt.Errorf("%w: the marketplace did not export the workspace of node %s of run %s (journey %s): %s", ErrUnavailable, nodeID, runID, journey, me.Message)
	}
	return fmt.Errorf("exporting the workspace of node %s of run %s (journey %s): %w", nodeID, runID, journey, errors.New(me.Message))
}
