package journeys

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/textcut"

	"github.com/meshwork/meshwork/services/marketplace/internal/meshworker"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// WorkerState is the output of get_worker_state and one entry of list_journeys.
type WorkerState = meshapi.Journey

func stateOf(j store.Journey) WorkerState {
	return WorkerState{
		JourneyID: j.ID, WorkerID: j.WorkerID, State: string(j.State), IsolationLevel: j.IsolationLevel,
		ContainerID: j.ContainerID, Workspace: j.Workspace, CreatedAt: j.CreatedAt, LastUsedAt: j.LastUsedAt,
		ActionCount: j.ActionCount, CostUSD: j.CostUSD, SessionID: j.AgentSessionID, DefinitionHash: j.DefinitionHash,
	}
}

func (m *Manager) journey(ctx context.Context, caller, id string) (store.Journey, error) {
	// Checked before the store sees it: no journey has another kind of id,
	// and one with a NUL byte would be Postgres's error, not the caller's.
	if err := checkJourneyID(id); err != nil {
		return store.Journey{}, err
	}
	j, err := m.cfg.Store.Journey(ctx, caller, id)
	if errors.Is(err, store.ErrNotFound) {
		return j, notFound("no journey %q", id)
	}
	return j, err
}

// State reports a journey, checking that a live one still has its worker.
func (m *Manager) State(ctx context.Context, caller, id string) (WorkerState, error) {
	j, err := m.journey(ctx, caller, id)
	if err != nil {
		return WorkerState{}, err
	}
	if j.State == store.StateActive && !m.checkLive(ctx, j) {
		j.State = store.StateOrphaned
	}
	counts, err := m.cfg.Store.ActionCounts(ctx, j.UID)
	if err != nil {
		return WorkerState{}, err
	}
	s := stateOf(j)
	s.Refused, s.Failed = counts.Refused, counts.Failed
	return s, nil
}

// Audit returns a page of a journey's audit log, newest first: its
// actions and what the gate decided, results taken out, its agent's own
// tool calls and its egress.
func (m *Manager) Audit(ctx context.Context, caller string, req meshapi.JourneyAuditIn) (meshapi.JourneyAuditOut, error) {
	limit, err := pageLimit(req.Limit)
	if err != nil {
		return meshapi.JourneyAuditOut{}, err
	}
	if req.Before < 0 {
		return meshapi.JourneyAuditOut{}, invalid("before %d is not a next_before journey_audit returned", req.Before)
	}
	j, err := m.journey(ctx, caller, req.JourneyID)
	if err != nil {
		return meshapi.JourneyAuditOut{}, err
	}
	rows, err := m.cfg.Store.RecentActions(ctx, j.UID, req.Before, limit+1) // one more: is there a next page?
	if err != nil {
		return meshapi.JourneyAuditOut{}, err
	}
	out := meshapi.JourneyAuditOut{JourneyID: j.ID, Entries: make([]meshapi.AuditEntry, 0, min(len(rows), limit))}
	for i, r := range rows {
		if i == limit {
			out.NextBefore = rows[i-1].ID
			break
		}
		out.Entries = append(out.Entries, meshapi.AuditEntry{
			ID: r.ID, At: r.CreatedAt, Caller: r.Caller, Type: r.ActionType, Target: r.Target, Decision: string(r.Decision),
			Violations: r.Violations, Error: r.Error, DurationMS: float64(r.Duration.Microseconds()) / 1000,
			CostUSD: r.CostUSD, TraceID: r.TraceID, ParentID: r.ParentID,
		})
	}
	return out, nil
}

// pageLimit is a page's size: limit, or the default for 0.
func pageLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return meshapi.DefaultPageLimit, nil
	case limit < 0 || limit > meshapi.MaxPageLimit:
		return 0, invalid("limit %d is not from 1 to %d", limit, meshapi.MaxPageLimit)
	}
	return limit, nil
}

// ListRequest is the input of list_journeys.
type ListRequest = meshapi.ListJourneysIn

// ListResult is the output of list_journeys.
type ListResult = meshapi.ListJourneysOut

// listCursor is where a page of list_journeys ended: its last journey's
// creation time and id, the listing's order. Clients pass it back opaque.
type listCursor struct {
	Created time.Time `json:"t"`
	ID      string    `json:"id"`
}

func (c listCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (listCursor, error) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&c)
	}
	if err != nil || c.Created.IsZero() || !meshapi.ValidID(c.ID) {
		return listCursor{}, invalid("cursor %q is not a next_cursor list_journeys returned", textcut.Valid(s, 64))
	}
	return c, nil
}

// List lists a page of the caller's journeys, newest first, optionally in
// one state.
func (m *Manager) List(ctx context.Context, caller string, req ListRequest) (ListResult, error) {
	if req.State != "" && !slices.Contains(meshapi.JourneyStates, req.State) {
		return ListResult{}, invalid("state %q is not one of %s", req.State, strings.Join(meshapi.JourneyStates, ", "))
	}
	limit, err := pageLimit(req.Limit)
	if err != nil {
		return ListResult{}, err
	}
	page := store.Page{Limit: limit + 1} // one more: is there a next page?
	if req.Cursor != "" {
		c, err := decodeCursor(req.Cursor)
		if err != nil {
			return ListResult{}, err
		}
		page.AfterCreated, page.AfterID = &c.Created, c.ID
	}
	js, err := m.cfg.Store.Journeys(ctx, caller, store.JourneyState(req.State), page)
	if err != nil {
		return ListResult{}, err
	}
	out := ListResult{Journeys: make([]WorkerState, 0, min(len(js), limit))}
	for i, j := range js {
		if i == limit {
			last := js[i-1]
			out.NextCursor = listCursor{Created: last.CreatedAt, ID: last.ID}.encode()
			break
		}
		out.Journeys = append(out.Journeys, stateOf(j))
	}
	return out, nil
}

// StopRequest is the input of stop_worker.
type StopRequest = meshapi.StopWorkerIn

// StopResult is the output of stop_worker.
type StopResult = meshapi.StopWorkerOut

// Stop stops a journey's worker and keeps, archives or deletes its workspace.
//
// It does not wait for an action on the journey (removing the worker ends
// it), so a spawn may begin on the journey while it stops: a spawn under
// way is waited for, and one that begins after the journey was read is
// noticed when its state is written (Store.StopIf), and the stop goes round
// again, on the journey it read first: never on another that took its id
// after a stop deleted it.
func (m *Manager) Stop(ctx context.Context, caller string, req StopRequest) (StopResult, error) {
	mode := req.Workspace
	if mode == "" {
		mode = "keep"
	}
	if mode != "keep" && mode != "archive" && mode != "delete" && mode != "patch" {
		return StopResult{}, invalid("workspace %q is not one of keep, archive, patch, delete", req.Workspace)
	}
	var uid uuid.UUID // the journey the first round read
	for range stopRounds {
		res, raced, err := m.stopOnce(ctx, caller, req.JourneyID, &uid, mode)
		if !raced {
			return res, err
		}
	}
	return StopResult{}, conflict("journey %q was spawned again each time it stopped; stop it again", req.JourneyID)
}

// stopRounds is how many times Stop goes round when spawns keep beginning
// on the journey it stops.
const stopRounds = 3

// stopOnce is one round of Stop; raced is true when a spawn began on the
// journey after it was read, and the round changed nothing the next one
// does not do again. The first round reads the journey by its id and sets
// *uid; the next ones read that journey again.
func (m *Manager) stopOnce(ctx context.Context, caller, id string, uid *uuid.UUID, mode string) (res StopResult, raced bool, err error) {
	removed := false // the worker and (but with keep) its workspace
	j, err := m.stopping(ctx, caller, id, *uid)
	if err != nil {
		return StopResult{}, false, err
	}
	*uid = j.UID
	// Under the journey's lock no spawn (and no action) runs. A patch is
	// taken under it: no action runs until the workspace is gone, so the
	// patch is all there was. A journey being spawned waits for its spawn
	// (a spawn cannot be stopped half-way), or was left starting by a
	// marketplace that died, and then the lock is free.
	locked := mode == "patch" || j.State == store.StateStarting
	if locked {
		unlock, err := m.lockJourney(ctx, j.UID)
		if err != nil {
			return StopResult{}, false, err
		}
		defer unlock()
		// The journey the lock is on, as it is now (deleted meanwhile,
		// perhaps, and its id given to another).
		if j, err = m.cfg.Store.JourneyByUID(ctx, j.UID); err != nil {
			return StopResult{}, false, err
		}
		if j.State == store.StateDeleted {
			return StopResult{}, false, notFound("no journey %q", id)
		}
	}
	if mode == "patch" {
		// A refused change leaves the journey as it was, for the agent to
		// fix.
		ch, refusal, base, err := m.change(ctx, caller, j, nil, auditStop)
		_ = base.Close() // the patch is taken: the base is no longer read
		if err != nil {
			return StopResult{}, false, err
		}
		if refusal.Refused {
			return StopResult{JourneyID: j.ID, State: string(j.State), Refusal: refusal}, false, nil
		}
		res.Patch, res.Summary = string(ch.Patch), &ch.Summary
	}
	rt, _, err := m.runtimeFor(j.IsolationLevel)
	if err != nil {
		return StopResult{}, false, err
	}
	h := handle(j)
	if mode == "archive" && h.Workspace == "" {
		return StopResult{}, false, conflict("journey %q has no workspace to archive", j.ID)
	}
	m.dropChannel(j.UID) // ends the action in flight, if any
	res.JourneyID = j.ID
	if mode == "archive" {
		if res.Archive, res.Bytes, res.SHA256, err = m.archive(ctx, rt, j); err != nil {
			// Nothing removed: the worker and its workspace are still
			// there (the next action opens a channel again).
			return StopResult{}, false, err
		}
		// An archive whose stop fails before the workspace is removed is
		// not the caller's: it is removed rather than left unreported, one
		// more each time the stop is tried again. Once the workspace is
		// gone the archive is its only copy, kept and logged whatever
		// follows.
		archived := res.Archive
		defer func() {
			switch {
			case err == nil && !raced:
			case !removed:
				if rerr := os.Remove(archived); rerr != nil {
					m.logger.WarnContext(ctx, "removing the archive of a failed stop", slog.String("archive", archived), slog.Any("error", rerr))
				}
			default:
				m.logger.WarnContext(ctx, "a stop failed after its workspace was removed; its archive is kept", slog.String("journey", j.UID.String()), slog.String("archive", archived), slog.Bool("raced", raced), slog.Any("error", err))
			}
		}()
	}
	// Revoked before the worker goes, so that its address cannot serve
	// another container with this grant.
	m.egressRevoke(j.UID)
	if h.ID != "" || h.Workspace != "" {
		if err := rt.Remove(ctx, h, workerruntime.RemoveOptions{Workspace: mode != "keep"}); err != nil {
			// The worker may still run: an egress worker gets its way
			// out back.
			m.regrantEgress(context.WithoutCancel(ctx), rt, j)
			return StopResult{}, false, unavailable("stopping the worker: %v", err)
		}
	}
	removed = true
	// A stopped agent's nested token stops working with it, and its nested
	// journeys stop with it: after its own state, so that a nested spawn
	// either committed before (and is found) or is refused (the parent is
	// not live).
	if err := m.cfg.Store.RevokeNested(ctx, j.UID); err != nil {
		return StopResult{}, false, err
	}
	state := store.StateStopped
	if mode != "keep" {
		state = store.StateDeleted
	}
	if locked {
		err = m.cfg.Store.SetState(ctx, j.UID, state)
	} else {
		var stopped bool
		if stopped, err = m.cfg.Store.StopIf(ctx, j.UID, state, j.Spawns); err == nil && !stopped {
			m.logger.InfoContext(ctx, "the journey changed while it stopped (a spawn began, or another stop deleted it); going round again", slog.String("journey", j.UID.String()))
			return StopResult{}, true, nil
		}
	}
	if err != nil {
		return StopResult{}, false, err
	}
	if mode != "keep" {
		m.dropBase(ctx, j)
	}
	// The journey is stopped now, whatever becomes of its nested ones: a
	// nested journey that would not stop is logged, and the stop's result
	// (a patch among it) still returned.
	res.Nested, err = m.stopNested(ctx, j, mode)
	if err != nil {
		m.logger.WarnContext(ctx, "stopping nested journeys with their parent failed", slog.String("journey", j.UID.String()), slog.Any("error", err))
	}
	res.State = string(state)
	m.logger.InfoContext(ctx, "worker stopped", slog.String("journey", j.UID.String()), slog.String("workspace", mode))
	return res, false, nil
}

// stopping is the journey a round of Stop stops: caller's journey id in
// the first round (uid is zero), the journey with uid after. A round that
// goes again because another stop deleted the journey ends there, rather
// than stop a journey the caller spawned under the same id meanwhile.
func (m *Manager) stopping(ctx context.Context, caller, id string, uid uuid.UUID) (store.Journey, error) {
	if uid == uuid.Nil {
		return m.journey(ctx, caller, id)
	}
	j, err := m.cfg.Store.JourneyByUID(ctx, uid)
	if errors.Is(err, store.ErrNotFound) || err == nil && j.State == store.StateDeleted {
		return store.Journey{}, notFound("journey %q was deleted by another stop_worker while this one ran", id)
	}
	return j, err
}

// stopNested stops the live journeys an agent journey spawned (and theirs),
// keeping their workspaces unless the parent's is deleted. It returns their
// ids as their callers know them.
func (m *Manager) stopNested(ctx context.Context, parent store.Journey, mode string) ([]string, error) {
	nested, err := m.cfg.Store.NestedJourneys(ctx, parent.UID)
	if err != nil {
		return nil, err
	}
	childMode := "keep"
	if mode == "delete" || mode == "patch" {
		childMode = "delete"
	}
	// One that fails does not keep the others running: once the parent is
	// stopped, its nested journeys' caller (its agent) is gone, and nobody
	// else can stop them.
	var stopped []string
	var errs []error
	for _, n := range nested {
		if !n.State.Live() && childMode == "keep" {
			continue
		}
		if _, err := m.Stop(ctx, n.Caller, StopRequest{JourneyID: n.ID, Workspace: childMode}); err != nil {
			errs = append(errs, fmt.Errorf("stopping nested journey %s: %w", n.ID, err))
			continue
		}
		m.logger.InfoContext(ctx, "stopped a nested journey with its parent", slog.String("journey", n.UID.String()), slog.String("parent", parent.UID.String()))
		stopped = append(stopped, n.Caller+"/"+n.ID)
	}
	return stopped, errors.Join(errs...)
}

// archive writes the workspace as a tarball into ArchiveDir, atomically.
func (m *Manager) archive(ctx context.Context, rt workerruntime.Runtime, j store.Journey) (path string, size int64, sum string, err error) {
	if err := os.MkdirAll(m.cfg.ArchiveDir, 0o700); err != nil {
		return "", 0, "", fmt.Errorf("creating the archive directory: %w", err)
	}
	name := fmt.Sprintf("%s-%s.tar", j.UID, time.Now().UTC().Format("20060102T150405Z"))
	tmp, err := os.CreateTemp(m.cfg.ArchiveDir, ".partial-*")
	if err != nil {
		return "", 0, "", fmt.Errorf("creating the archive: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	limit := m.archiveLimit(j)
	cw := &capped{w: io.MultiWriter(tmp, h), left: limit}
	if err := rt.ExportWorkspace(ctx, handle(j), cw); err != nil {
		_ = tmp.Close()
		if errors.Is(err, errExportTooLarge) {
			return "", 0, "", &Error{Code: CodeResourceExhausted, Message: fmt.Sprintf(
				"journey %q: the archive of its workspace passes %d bytes (its quota, isolation.resources.workspace, a quarter more, and room for the files' headers); nothing was removed: delete files in it, or stop it with workspace keep", j.ID, limit)}
		}
		return "", 0, "", unavailable("archiving the workspace: %v", err)
	}
	if err := tmp.Close(); err != nil {
		return "", 0, "", fmt.Errorf("writing the archive: %w", err)
	}
	path = filepath.Join(m.cfg.ArchiveDir, name)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", 0, "", fmt.Errorf("writing the archive: %w", err)
	}
	return path, limit - cw.left, hex.EncodeToString(h.Sum(nil)), nil
}

// archiveLimit bounds a stop's archive of j's workspace: the workspace
// quota of its worker's definition, a quarter more (a command may pass the
// quota before it is stopped, and an MCP worker's server keeps none), and
// 1 KiB of tar headers for each file the quota allows. A worker no longer
// in the catalog is held to the default quota.
func (m *Manager) archiveLimit(j store.Journey) int64 {
	r := meshtype.Resources{Workspace: meshworker.DefaultMaxWorkspaceBytes, WorkspaceFiles: meshworker.DefaultMaxWorkspaceFiles}
	if e, ok := m.cfg.Catalog.Lookup(j.WorkerID); ok {
		r = e.Definition.Isolation.Resources
	}
	// Saturating: a definition may set quotas near the int64 range.
	const most = math.MaxInt64 / 4
	bytes, files := min(int64(r.Workspace), most), min(r.WorkspaceFiles, most>>10)
	return bytes + bytes/4 + files<<10
}

// LogsResult is the output of worker_logs.
type LogsResult struct {
	JourneyID string `json:"journey_id"`
	Logs      string `json:"logs"`
}

// MaxLogTail is the most log lines worker_logs returns.
const MaxLogTail = 10000

// Logs returns the last lines of a journey's worker output.
func (m *Manager) Logs(ctx context.Context, caller, id string, tail int) (LogsResult, error) {
	if tail <= 0 {
		tail = 100
	}
	if tail > MaxLogTail {
		return LogsResult{}, invalid("tail %d is above the limit of %d lines", tail, MaxLogTail)
	}
	j, err := m.journey(ctx, caller, id)
	if err != nil {
		return LogsResult{}, err
	}
	rt, _, err := m.runtimeFor(j.IsolationLevel)
	if err != nil {
		return LogsResult{}, err
	}
	if j.ContainerID == "" {
		return LogsResult{JourneyID: j.ID}, nil
	}
	b, err := rt.Logs(ctx, handle(j), tail)
	if errors.Is(err, workerruntime.ErrNotFound) {
		return LogsResult{JourneyID: j.ID}, nil
	}
	if err != nil {
		return LogsResult{}, unavailable("reading logs: %v", err)
	}
	return LogsResult{JourneyID: j.ID, Logs: string(b)}, nil
}

// Reconcile makes the runtimes agree with the store, as the marketplace
// starts: workers labelled as ours whose journey is not live are removed
// (their workspace is kept unless the journey is gone), live journeys
// whose worker is not running are marked orphaned, and warm pool members
// are kept only as a row with a running worker.
func (m *Manager) Reconcile(ctx context.Context) error {
	known, err := m.cfg.Store.KnownJourneys(ctx)
	if err != nil {
		return err
	}
	running := map[uuid.UUID]bool{}
	listed := map[uuid.UUID]bool{}
	for level, rt := range m.cfg.Runtimes {
		workers, err := rt.List(ctx, m.cfg.Labels)
		if err != nil {
			return fmt.Errorf("listing %s workers: %w", level, err)
		}
		for _, w := range workers {
			uid, err := uuid.Parse(w.Journey)
			listed[uid] = true
			j, ok := known[uid]
			if err == nil && ok && j.State.Live() && j.ContainerID == w.ID && w.State == workerruntime.StateRunning {
				running[uid] = true
				m.regrantEgress(ctx, rt, j)
				continue
			}
			if w.ID == "" {
				continue // a workspace without a worker: a stopped journey's
			}
			if err != nil {
				m.removeStale(ctx, rt, w, true)
				continue
			}
			if m.reconcileWorker(ctx, rt, uid, w) {
				running[uid] = true
			}
		}
	}
	if err := m.reconcilePoolRows(ctx, listed); err != nil {
		return err
	}
	// A journey left starting with its worker running (a claimed pool
	// member's) was counted running above.
	if _, err := m.SweepAbandonedSpawns(ctx); err != nil {
		return err
	}
	m.pruneBases(ctx)
	for uid, j := range known {
		// A journey left starting is the sweep's, above.
		if j.State == store.StateActive && !running[uid] {
			if err := m.orphan(ctx, uid); err != nil {
				return err
			}
		}
	}
	return nil
}

// reconcileWorker decides, under the journey's lock, about a worker that
// the journeys read at the start did not account for: another marketplace
// on the database may have spawned it since. It reports whether the
// worker is its journey's, running. A journey whose lock another holds is
// being spawned or acted on there: its worker is left alone.
func (m *Manager) reconcileWorker(ctx context.Context, rt workerruntime.Runtime, uid uuid.UUID, w workerruntime.Listed) bool {
	unlock, ok, err := m.tryLockJourney(ctx, uid)
	if err != nil {
		m.logger.WarnContext(ctx, "leaving a worker: its journey's lock could not be taken", slog.String("id", w.ID), slog.Any("error", err))
		return false
	}
	if !ok {
		return false
	}
	defer unlock()
	j, err := m.cfg.Store.JourneyByUID(ctx, uid)
	if err == nil && j.State.Live() && j.ContainerID == w.ID && w.State == workerruntime.StateRunning {
		m.regrantEgress(ctx, rt, j)
		return true
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		m.logger.WarnContext(ctx, "leaving a worker: its journey could not be read", slog.String("id", w.ID), slog.Any("error", err))
		return false
	}
	if errors.Is(err, store.ErrNotFound) && m.reconcilePoolWorker(ctx, rt, uid, w) {
		return false // a pool member's: not a journey's, and kept
	}
	m.removeStale(ctx, rt, w, errors.Is(err, store.ErrNotFound))
	return false
}

// SweepAbandonedSpawns ends, while the marketplace runs, the spawns that
// another marketplace died in the middle of (Reconcile does it only as a
// marketplace starts). A spawn holds its journey's lock from before the
// journey turns starting until its worker is recorded, so a journey still
// starting whose lock is free has no spawn left: the worker that spawn
// may have created is removed (its workspace kept) and the journey is
// orphaned, for stop_worker or spawn_worker mode resume to take up. It
// returns how many journeys it orphaned.
func (m *Manager) SweepAbandonedSpawns(ctx context.Context) (int, error) {
	uids, err := m.cfg.Store.StartingJourneys(ctx)
	if err != nil {
		return 0, err
	}
	swept := 0
	for _, uid := range uids {
		ok, err := m.sweepAbandonedSpawn(ctx, uid)
		if err != nil {
			return swept, err
		}
		if ok {
			swept++
		}
	}
	return swept, nil
}

// sweepAbandonedSpawn orphans uid if it is starting with no spawn holding
// its lock, and reports whether it did.
func (m *Manager) sweepAbandonedSpawn(ctx context.Context, uid uuid.UUID) (bool, error) {
	unlock, ok, err := m.tryLockJourney(ctx, uid)
	if err != nil || !ok {
		return false, err // being spawned, here or elsewhere
	}
	defer unlock()
	j, err := m.cfg.Store.JourneyByUID(ctx, uid)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if j.State != store.StateStarting {
		return false, nil // its spawn ended between the list and the lock
	}
	if rt, _, err := m.runtimeFor(j.IsolationLevel); err == nil {
		workers, err := rt.List(ctx, m.journeyLabels(uid))
		if err != nil {
			return false, fmt.Errorf("listing the workers of journey %s: %w", uid, err)
		}
		// Even one recorded and running (a claimed pool member's) is
		// nobody's: no spawn is left to make it the journey's.
		for _, w := range workers {
			if w.ID != "" {
				m.removeStale(ctx, rt, w, false)
			}
		}
	}
	orphaned, err := m.cfg.Store.Orphan(ctx, uid, j.ContainerID, j.Spawns)
	if err != nil || !orphaned {
		return false, err
	}
	m.logger.WarnContext(ctx, "a spawn was abandoned half-way; journey orphaned", slog.String("journey", uid.String()))
	return true, nil
}

// journeyLabels is the label filter that lists uid's workers only.
func (m *Manager) journeyLabels(uid uuid.UUID) map[string]string {
	labels := maps.Clone(m.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[workerruntime.LabelJourney] = uid.String()
	return labels
}

// removeStale removes a worker without a live journey, and its workspace
// when no journey has it.
func (m *Manager) removeStale(ctx context.Context, rt workerruntime.Runtime, w workerruntime.Listed, workspace bool) {
	m.logger.InfoContext(ctx, "removing a worker without a live journey", slog.String("journey", w.Journey), slog.String("id", w.ID), slog.Bool("workspace", workspace))
	if err := rt.Remove(ctx, w.Handle, workerruntime.RemoveOptions{Workspace: workspace}); err != nil {
		m.logger.WarnContext(ctx, "removing a stale worker failed", slog.String("id", w.ID), slog.Any("error", err))
	}
}

// orphan marks an active journey without a running worker orphaned, under
// its lock, unless it changed since it was read: another marketplace is
// spawning or acting on it (its lock is held), or spawned it since. A
// journey left starting is SweepAbandonedSpawns's.
func (m *Manager) orphan(ctx context.Context, uid uuid.UUID) error {
	unlock, ok, err := m.tryLockJourney(ctx, uid)
	if err != nil || !ok {
		return err
	}
	defer unlock()
	j, err := m.cfg.Store.JourneyByUID(ctx, uid)
	if err != nil {
		return err
	}
	if j.State != store.StateActive || m.checkLive(ctx, j) {
		return nil
	}
	// Orphaned here if checkLive did not (it has, and this finds nothing
	// to change, when the engine said the worker is gone): an isolation
	// level this marketplace does not serve.
	if ok, err := m.cfg.Store.Orphan(ctx, uid, j.ContainerID, j.Spawns); err != nil || !ok {
		return err
	}
	m.logger.WarnContext(ctx, "journey has no running worker; orphaned", slog.String("journey", uid.String()))
	return nil
}

// StopIdle stops the workers of journeys idle past their definition's
// idle_timeout, keeping their workspaces. It returns how many it stopped.
func (m *Manager) StopIdle(ctx context.Context, now time.Time) (int, error) {
	// The smallest timeout bounds the query; each journey is then checked
	// against its own definition.
	minTimeout := time.Duration(0)
	for _, e := range m.cfg.Catalog.Entries() {
		if t := time.Duration(e.Definition.Isolation.IdleTimeout); t > 0 && (minTimeout == 0 || t < minTimeout) {
			minTimeout = t
		}
	}
	if minTimeout == 0 {
		return 0, nil
	}
	idle, err := m.cfg.Store.IdleJourneys(ctx, now.Add(-minTimeout))
	if err != nil {
		return 0, err
	}
	stopped := 0
	for _, j := range idle {
		e, ok := m.cfg.Catalog.Lookup(j.WorkerID)
		timeout := time.Duration(0)
		if ok {
			timeout = time.Duration(e.Definition.Isolation.IdleTimeout)
		}
		if timeout == 0 || now.Sub(j.LastUsedAt) < timeout {
			continue
		}
		unlock, ok, err := m.tryLockJourney(ctx, j.UID)
		if err != nil || !ok {
			continue // an action is running, here or on another marketplace: not idle
		}
		// An action may have ended since the list was read.
		// Only an active journey: a starting one is a spawn's (this lock
		// is on it, and Stop would wait for the lock again).
		fresh, err := m.cfg.Store.JourneyByUID(ctx, j.UID)
		if err != nil || fresh.State != store.StateActive || now.Sub(fresh.LastUsedAt) < timeout {
			unlock()
			continue
		}
		_, err = m.Stop(ctx, j.Caller, StopRequest{JourneyID: j.ID, Workspace: "keep"})
		unlock()
		if err != nil {
			m.logger.WarnContext(ctx, "stopping an idle worker failed", slog.String("journey", j.UID.String()), slog.Any("error", err))
			continue
		}
		m.logger.InfoContext(ctx, "stopped an idle worker", slog.String("journey", j.UID.String()), slog.Duration("idle", now.Sub(fresh.LastUsedAt)))
		stopped++
	}
	return stopped, nil
}

// RunIdleStopper calls StopIdle, CloseIdleChannels and
// SweepAbandonedSpawns every interval until ctx ends.
func (m *Manager) RunIdleStopper(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if _, err := m.StopIdle(ctx, now); err != nil && ctx.Err() == nil {
				m.logger.WarnContext(ctx, "idle check failed", slog.Any("error", err))
			}
			m.CloseIdleChannels(ctx, now.Add(-m.cfg.ChannelIdle))
			if _, err := m.SweepAbandonedSpawns(ctx); err != nil && ctx.Err() == nil {
				m.logger.WarnContext(ctx, "sweeping abandoned spawns failed", slog.Any("error", err))
			}
		}
	}
}

// CloseIdleChannels closes the channels that carried no call since cutoff,
// and returns how many. The worker's server process exits with its
// channel, so an idle journey holds only its worker's idle process; its
// next action opens a channel again (tens of milliseconds). A channel is
// closed under its journey's lock, so never under an action.
func (m *Manager) CloseIdleChannels(ctx context.Context, cutoff time.Time) int {
	m.mu.Lock()
	var idle []uuid.UUID
	for uid, c := range m.channels {
		if c.lastUsed.Load() < cutoff.UnixNano() {
			idle = append(idle, uid)
		}
	}
	m.mu.Unlock()
	closed := 0
	for _, uid := range idle {
		unlock, ok, err := m.tryLockJourney(ctx, uid)
		if err != nil || !ok {
			continue // an action is running: not idle
		}
		m.mu.Lock()
		c := m.channels[uid]
		if c != nil && c.lastUsed.Load() < cutoff.UnixNano() {
			delete(m.channels, uid)
		} else {
			c = nil
		}
		m.mu.Unlock()
		unlock()
		if c != nil {
			c.close()
			closed++
		}
	}
	return closed
}

// pruneBases removes the bases of deleted journeys (a stop that removed
// the workspace but died before the base) and drafts of interrupted spawns.
// A base whose journey this database does not know is left alone: it may be
// another marketplace's, on the same directory.
func (m *Manager) pruneBases(ctx context.Context) {
	uids, err := m.cfg.Bases.Journeys()
	if err == nil {
		var deleted []uuid.UUID
		if deleted, err = m.cfg.Store.DeletedJourneys(ctx, uids); err == nil {
			for _, uid := range deleted {
				if err = m.cfg.Bases.Remove(uid); err != nil {
					break
				}
			}
		}
	}
	if err == nil {
		_, err = m.cfg.Bases.PruneDrafts(time.Now())
	}
	if err != nil {
		m.logger.WarnContext(ctx, "pruning bases failed", slog.Any("error", err))
	}
}
