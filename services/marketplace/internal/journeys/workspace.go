package journeys

import (
	"archive/tar"
	"bufio"
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
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/google/uuid"

	"github.com/meshwork/meshwork/pkg/gate"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/pkg/meshtype"
	"github.com/meshwork/meshwork/pkg/textcut"
	"github.com/meshwork/meshwork/services/marketplace/internal/bases"
	"github.com/meshwork/meshwork/services/marketplace/internal/source"
	"github.com/meshwork/meshwork/services/marketplace/internal/store"
	"github.com/meshwork/meshwork/services/marketplace/internal/workdiff"
	"github.com/meshwork/meshwork/services/marketplace/internal/workerruntime"
)

// pipeBuffer is the buffer on each side of a pipe that carries a tar.
const pipeBuffer = 256 << 10

// MaxExportBytes bounds what export_workspace returns inline (a tar or a
// bundle, before base64); larger workspaces leave through stop_worker's
// archive mode.
const MaxExportBytes = 32 << 20

// Audit action types of what leaves a worker: audited like actions, with
// the result gate's decision, and not counted against max_actions.
const (
	auditDiff   = "workspace_diff"
	auditExport = "export_workspace"
	auditStop   = "stop_worker"
)

// preparedSource is a checked source, built in memory, not yet anywhere.
type preparedSource struct {
	draft  *bases.Draft
	record *source.Record // nil when no source was given
}

// prepareSource checks a spawn's source and builds its base in memory,
// before anything is created: a refused source leaves nothing in Docker,
// Postgres or the base store. No source gives an empty base, so every new
// journey has one to diff against.
func (m *Manager) prepareSource(ctx context.Context, caller string, spec *source.Spec) (*preparedSource, error) {
	d := m.cfg.Bases.NewDraft(m.cfg.Sources.Limits)
	if spec == nil {
		if _, err := d.Commit("Meshwork: empty workspace", plumbing.ZeroHash, plumbing.ZeroHash); err != nil {
			return nil, err
		}
		return &preparedSource{draft: d}, nil
	}
	if err := spec.Validate(); err != nil {
		return nil, sourceError(err)
	}
	var (
		rec source.Record
		err error
	)
	switch spec.Kind() {
	case "git":
		rec, err = m.cfg.Sources.Git(ctx, caller, spec.Git, d)
	case "archive":
		rec, err = m.cfg.Sources.Archive(spec.Archive, d)
	case "journey":
		var from store.Journey
		if from, err = m.journey(ctx, caller, spec.Journey); err != nil {
			if e, ok := AsError(err); ok && e.Code == CodeNotFound {
				return nil, notFound("source.journey: no journey %q of yours", spec.Journey)
			}
			return nil, err // the store's failure, not the caller's
		}
		var base *bases.Base
		if base, err = m.openBase(from); err != nil {
			return nil, err
		}
		rec, err = source.Patch(base, from.ID, spec.Patch, d)
		_ = base.Close()
	}
	if err != nil {
		return nil, sourceError(err)
	}
	return &preparedSource{draft: d, record: &rec}, nil
}

// sourceError turns a refused source into a client error; anything else
// stays internal.
func sourceError(err error) error {
	if e, ok := source.AsError(err); ok {
		return &Error{Code: e.Code, Message: "source: " + e.Message}
	}
	if errors.Is(err, bases.ErrRefused) {
		return invalid("source: %s", strings.TrimPrefix(err.Error(), bases.ErrRefused.Error()+": "))
	}
	return err
}

// seed records a prepared base for a created worker and unpacks it into the
// workspace, owned by the worker's user.
func (m *Manager) seed(ctx context.Context, rt workerruntime.Runtime, h workerruntime.Handle, j store.Journey, d *meshtype.Definition, src *preparedSource) error {
	rec, err := m.seedWorkspace(ctx, rt, h, j.UID, d, src)
	if err != nil {
		return err
	}
	origin := ""
	if !rec.Origin.IsZero() {
		origin = rec.Origin.String()
	}
	var recorded []byte
	if src.record != nil {
		if recorded, err = json.Marshal(src.record); err != nil {
			return err
		}
	}
	return m.cfg.Store.SetBase(ctx, j.UID, rec.Commit.String(), origin, recorded)
}

// seedWorkspace keeps a prepared base in the base store under uid and
// unpacks it into the worker's workspace; the caller records it.
func (m *Manager) seedWorkspace(ctx context.Context, rt workerruntime.Runtime, h workerruntime.Handle, uid uuid.UUID, d *meshtype.Definition, src *preparedSource) (bases.Record, error) {
	// The base is written to the store while the files go into the
	// workspace (both read the draft, which no longer changes); the .git,
	// last in the tar, waits for it.
	var rec bases.Record
	kept := make(chan error, 1)
	go func() {
		var err error
		rec, err = m.cfg.Bases.Keep(uid, src.draft)
		kept <- err
	}()
	var (
		keepErr  error
		keepDone bool // the tar writer took Keep's outcome
	)
	gitDir := func(tw *tar.Writer, owner bases.Owner, mtime time.Time) error {
		keepErr, keepDone = <-kept, true
		if keepErr != nil {
			return keepErr
		}
		return m.cfg.Bases.GitDir(uid, rec, src.draft.Files())(tw, owner, mtime)
	}
	// The workspace gets the files and a .git of the base commit: a clean
	// checkout, for the worker's own use only.
	pr, pw := io.Pipe()
	written := make(chan struct{})
	go func() {
		defer close(written)
		bw := bufio.NewWriterSize(pw, pipeBuffer)
		err := src.draft.WriteTar(bw, ownerOf(d.Isolation.User), gitDir)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	err := rt.SeedWorkspace(ctx, h, bufio.NewReaderSize(pr, pipeBuffer))
	_ = pr.CloseWithError(io.ErrClosedPipe) // a runtime that stopped reading stops the writer
	<-written
	if !keepDone {
		keepErr = <-kept // the tar stopped before the .git: Keep is still ours to wait for
	}
	if keepErr != nil {
		return rec, keepErr
	}
	if err != nil {
		return rec, fmt.Errorf("seeding the workspace: %w", err)
	}
	return rec, nil
}

// ownerOf reads a definition's "uid[:gid]"; the defaults fill it in, so a
// bad one cannot reach here, but it falls back to the default user.
func ownerOf(user string) bases.Owner {
	u, g, ok := strings.Cut(user, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok {
		gid, err2 = uid, nil
	}
	if err1 != nil || err2 != nil {
		return bases.Owner{UID: 65532, GID: 65532}
	}
	return bases.Owner{UID: uid, GID: gid}
}

// openBase opens a journey's recorded base.
func (m *Manager) openBase(j store.Journey) (*bases.Base, error) {
	if j.BaseCommit == "" {
		return nil, conflict("journey %q has no recorded base (it was spawned before sources existed); spawn_worker with mode fresh gives it one", j.ID)
	}
	rec := bases.Record{Commit: plumbing.NewHash(j.BaseCommit)}
	if j.BaseOrigin != "" {
		rec.Origin = plumbing.NewHash(j.BaseOrigin)
	}
	b, err := m.cfg.Bases.Open(j.UID, rec)
	if errors.Is(err, bases.ErrNoBase) {
		return nil, unavailable("the recorded base of journey %q is missing from the marketplace's base store", j.ID)
	}
	return b, err
}

// BaseInfo is what a journey started from.
type BaseInfo struct {
	Commit string         `json:"commit" jsonschema:"the base commit in the marketplace's own record"`
	Origin string         `json:"origin,omitempty" jsonschema:"the git source's commit the base descends from"`
	Source *source.Record `json:"source,omitempty" jsonschema:"the source the journey was spawned from"`
}

// Refusal is the result gate's refusal of a change: every violation, and a
// message. Nothing was returned or removed.
type Refusal = meshapi.Refusal

// DiffRequest is the input of workspace_diff.
type DiffRequest struct {
	JourneyID string   `json:"journey_id"`
	Paths     []string `json:"paths,omitempty" jsonschema:"only changes to these files or under these directories (default: all)"`
}

// MaxDiffPaths is the most paths one workspace_diff narrows its patch to.
const MaxDiffPaths = 1000

// checkDiffPaths refuses a paths list too long to filter a change by (each
// changed file is matched against each path, under the journey's lock), or
// a path no workspace has.
func checkDiffPaths(paths []string) error {
	if len(paths) > MaxDiffPaths {
		return invalid("paths holds %d entries; at most %d", len(paths), MaxDiffPaths)
	}
	for _, p := range paths {
		if len(p) > gate.MaxPathLen || strings.ContainsRune(p, 0) {
			return invalid("paths: %q is not a workspace path (at most %d bytes, no NUL)", textcut.Valid(p, 64), gate.MaxPathLen)
		}
	}
	return nil
}

// DiffResult is the output of workspace_diff.
type DiffResult struct {
	JourneyID string                 `json:"journey_id"`
	Base      BaseInfo               `json:"base"`
	Summary   meshtype.ChangeSummary `json:"summary"`
	Patch     string                 `json:"patch" jsonschema:"git-format unified diff against the base; git apply takes it (binary files are listed in summary.binary, not inlined)"`
	Refusal
}

// change computes a journey's whole change against its base, checks it
// with the result gate and audits the decision (with paths, the part asked
// for, as the audit row's target). A refusal comes back as the Refusal,
// with a nil change. The caller holds the journey's action lock, so that no
// action changes the workspace while it is read; the change reads from the
// base, which the caller closes (a nil base is fine to close).
func (m *Manager) change(ctx context.Context, caller string, j store.Journey, paths []string, auditType string) (*workdiff.Change, Refusal, *bases.Base, error) {
	start := time.Now()
	entry, ok := m.cfg.Catalog.Lookup(j.WorkerID)
	if !ok {
		return nil, Refusal{}, nil, unavailable("worker %s of journey %q is no longer in the catalog", j.WorkerID, j.ID)
	}
	rt, _, err := m.runtimeFor(j.IsolationLevel)
	if err != nil {
		return nil, Refusal{}, nil, err
	}
	base, err := m.openBase(j)
	if err != nil {
		return nil, Refusal{}, nil, err
	}
	// Stops do not wait for reads: a worker removed while its workspace
	// was read through it is read again, without it.
	ch, err := m.readChange(ctx, rt, j, base)
	if errors.Is(err, workerruntime.ErrReadCut) {
		m.logger.InfoContext(ctx, "the worker was removed while its workspace was read; reading it again", slog.String("journey", j.UID.String()))
		ch, err = m.readChange(ctx, rt, j, base)
	}
	if errors.Is(err, workdiff.ErrTooLarge) || errors.Is(err, workdiff.ErrUnexportable) {
		return nil, Refusal{}, base, invalid("%v", err)
	}
	if err != nil {
		return nil, Refusal{}, base, unavailable("reading the workspace: %v", err)
	}
	rec := store.ActionRecord{
		JourneyUID: j.UID, Caller: caller, WorkerID: j.WorkerID, DefinitionHash: entry.Hash,
		ActionType: auditType, Target: strings.Join(paths, ","), Uncounted: true, // cut by the store
		ResponseBytes: int64(len(ch.Patch)),
	}
	// The whole change is judged, whatever part is asked for: a change is
	// not let out piecemeal past the limits.
	if vs := entry.Gate.EvaluateResult(&ch.Summary); len(vs) > 0 {
		rec.Decision, rec.Violations = store.DecisionRefused, vs
		m.record(ctx, rec, start)
		msgs := make([]string, len(vs))
		for i, v := range vs {
			msgs[i] = v.Message
		}
		return nil, Refusal{Refused: true, Violations: vs, Message: "Result gate refused the change: " + strings.Join(msgs, "; ")}, base, nil
	}
	rec.Decision = store.DecisionAllowed
	m.record(ctx, rec, start)
	return ch, Refusal{}, base, nil
}

// readChange reads the journey's workspace through rt and computes its
// change against base. A read the runtime says was cut (ErrReadCut) is
// that error, whatever the change computed from it.
func (m *Manager) readChange(ctx context.Context, rt workerruntime.Runtime, j store.Journey, base *bases.Base) (*workdiff.Change, error) {
	pr, pw := io.Pipe()
	var exportErr error
	exported := make(chan struct{})
	go func() {
		defer close(exported)
		// Buffered on both sides: a tar is many small writes, and an
		// unbuffered pipe hands each one over between the goroutines.
		bw := bufio.NewWriterSize(pw, pipeBuffer)
		err := rt.ExportWorkspace(ctx, handle(j), bw)
		if err == nil {
			err = bw.Flush()
		}
		exportErr = err
		pw.CloseWithError(err)
	}()
	ch, err := workdiff.Compute(base, bufio.NewReaderSize(pr, pipeBuffer), workdiff.Options{})
	_ = pr.CloseWithError(io.ErrClosedPipe) // an export still writing stops
	<-exported
	if errors.Is(exportErr, workerruntime.ErrReadCut) {
		return nil, exportErr
	}
	return ch, err
}

// lockedJourney looks up the caller's journey and takes its action lock;
// call unlock when done.
func (m *Manager) lockedJourney(ctx context.Context, caller, id string) (store.Journey, func(), error) {
	j, err := m.journey(ctx, caller, id)
	if err != nil {
		return j, nil, err
	}
	unlock, err := m.lockJourney(ctx, j.UID)
	if err != nil {
		return j, nil, err
	}
	return j, unlock, nil
}

func baseInfo(j store.Journey) BaseInfo {
	b := BaseInfo{Commit: j.BaseCommit, Origin: j.BaseOrigin}
	if len(j.Source) > 0 {
		var rec source.Record
		if json.Unmarshal(j.Source, &rec) == nil {
			b.Source = &rec
		}
	}
	return b
}

// Diff returns a journey's change against its base, if the result gate
// allows it.
func (m *Manager) Diff(ctx context.Context, caller string, req DiffRequest) (DiffResult, error) {
	if err := checkDiffPaths(req.Paths); err != nil {
		return DiffResult{}, err
	}
	j, unlock, err := m.lockedJourney(ctx, caller, req.JourneyID)
	if err != nil {
		return DiffResult{}, err
	}
	defer unlock()
	ch, refusal, base, err := m.change(ctx, caller, j, req.Paths, auditDiff)
	defer func() { _ = base.Close() }()
	if err != nil {
		return DiffResult{}, err
	}
	out := DiffResult{JourneyID: j.ID, Base: baseInfo(j), Refusal: refusal, Summary: meshtype.ChangeSummary{Files: []meshtype.ChangedFile{}}}
	if ch != nil {
		var patch []byte
		out.Summary, patch = ch.Only(req.Paths)
		out.Patch = string(patch)
	}
	return out, nil
}

// ExportRequest is the input of export_workspace.
type ExportRequest struct {
	JourneyID string `json:"journey_id"`
	Format    string `json:"format,omitempty" jsonschema:"patch (default: the diff against the base), tar (the workspace's files) or bundle (a git bundle of one commit on the git source's commit)"`
}

// ExportResult is the output of export_workspace.
type ExportResult struct {
	JourneyID     string                 `json:"journey_id"`
	Format        string                 `json:"format"`
	Base          BaseInfo               `json:"base"`
	Summary       meshtype.ChangeSummary `json:"summary"`
	Patch         string                 `json:"patch,omitempty" jsonschema:"format patch: the git-format diff"`
	ContentBase64 string                 `json:"content_base64,omitempty" jsonschema:"format tar or bundle: the file, base64-encoded"`
	Bytes         int64                  `json:"bytes"`
	SHA256        string                 `json:"sha256,omitempty"`
	Commit        string                 `json:"commit,omitempty" jsonschema:"format bundle: the commit it holds, as refs/heads/meshwork"`
	Refusal
}

// Export returns a journey's change as a patch, a tar or a git bundle, if
// the result gate allows it.
func (m *Manager) Export(ctx context.Context, caller string, req ExportRequest) (ExportResult, error) {
	format := req.Format
	if format == "" {
		format = "patch"
	}
	if format != "patch" && format != "tar" && format != "bundle" {
		return ExportResult{}, invalid("format %q is not one of patch, tar, bundle", req.Format)
	}
	j, unlock, err := m.lockedJourney(ctx, caller, req.JourneyID)
	if err != nil {
		return ExportResult{}, err
	}
	defer unlock()
	ch, refusal, base, err := m.change(ctx, caller, j, nil, auditExport)
	defer func() { _ = base.Close() }()
	if err != nil {
		return ExportResult{}, err
	}
	out := ExportResult{JourneyID: j.ID, Format: format, Base: baseInfo(j), Refusal: refusal, Summary: meshtype.ChangeSummary{Files: []meshtype.ChangedFile{}}}
	if ch == nil {
		return out, nil
	}
	out.Summary = ch.Summary
	var buf bytes.Buffer
	w := &capped{w: &buf, left: MaxExportBytes}
	// Dated when the journey began, not now: the same workspace exports as
	// the same bytes, and a bundle as the same commit, so that taking it
	// again (and pulling it again) changes nothing.
	when := j.CreatedAt.UTC().Truncate(time.Second)
	switch format {
	case "patch":
		_, err = w.Write(ch.Patch)
		out.Patch = string(ch.Patch)
	case "tar":
		entry, _ := m.cfg.Catalog.Lookup(j.WorkerID)
		err = ch.WriteTar(w, ownerOf(entry.Definition.Isolation.User), when)
	case "bundle":
		var c plumbing.Hash
		c, err = ch.WriteBundle(w, "Meshwork: the change of journey "+j.ID, when)
		if errors.Is(err, workdiff.ErrNoOrigin) {
			return ExportResult{}, invalid("journey %q did not start from a git source; a bundle needs one (use format patch or tar)", j.ID)
		}
		out.Commit = c.String()
	}
	if errors.Is(err, errExportTooLarge) {
		return ExportResult{}, invalid("the %s passes %d bytes; stop_worker with workspace archive writes large workspaces", format, MaxExportBytes)
	}
	if err != nil {
		return ExportResult{}, err
	}
	sum := sha256.Sum256(buf.Bytes())
	out.Bytes, out.SHA256 = int64(buf.Len()), hex.EncodeToString(sum[:])
	if format != "patch" {
		out.ContentBase64 = base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	return out, nil
}

var errExportTooLarge = errors.New("export too large")

// capped fails a write past left bytes.
type capped struct {
	w    io.Writer
	left int64
}

func (c *capped) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, errExportTooLarge
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// dropBase removes a journey's base once its workspace is gone.
func (m *Manager) dropBase(ctx context.Context, j store.Journey) {
	if err := m.cfg.Bases.Remove(j.UID); err != nil {
		m.logger.WarnContext(ctx, "removing a base failed", slog.String("journey", j.UID.String()), slog.Any("error", err))
	}
}
