package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/pkg/meshapi"
)

// Journeys reads and stops the signed-in caller's marketplace journeys, as
// the marketplace would for that caller (journeyview.Client).
type Journeys interface {
	List(ctx context.Context, caller string, in meshapi.ListJourneysIn) (meshapi.ListJourneysOut, error)
	State(ctx context.Context, caller, journeyID string) (meshapi.Journey, error)
	Audit(ctx context.Context, caller string, in meshapi.JourneyAuditIn) (meshapi.JourneyAuditOut, error)
	Stop(ctx context.Context, caller string, in meshapi.StopWorkerIn) (meshapi.StopWorkerOut, error)
}

// stopModes are the workspace modes the console's stop offers (patch mode
// is the API's: it returns the diff).
var stopModes = []string{"keep", "archive", "delete"}

// journeysPerPage and auditPerPage are the page sizes of the journeys page
// and of a journey's audit log.
const (
	journeysPerPage = 50
	auditPerPage    = 100
)

// journeysData is the journeys page.
type journeysData struct {
	// Off: the orchestrator has no marketplace to ask.
	Off      bool
	Journeys []meshapi.Journey
	State    string
	States   []string
	Next     string // the cursor of the next page
	// Archived is the archive a stop just wrote; ListFailed, that the
	// journeys could not be listed after it.
	Archived   *meshapi.StopWorkerOut
	ListFailed bool
}

func (c *console) journeys(w http.ResponseWriter, r *http.Request) {
	c.listJourneys(w, r, c.takeArchived(w, r))
}

// archivedCookie carries, once, from an archiving stop to the journeys page
// it redirects to, what the archive is: a reload of that page sends nothing
// again, and shows the archive no more.
const archivedCookie = "meshwork_archived"

// putArchived keeps out for the next journeys page.
func (c *console) putArchived(w http.ResponseWriter, r *http.Request, out meshapi.StopWorkerOut) {
	b, err := json.Marshal(meshapi.StopWorkerOut{JourneyID: out.JourneyID, Archive: out.Archive, Bytes: out.Bytes, SHA256: out.SHA256})
	if err != nil || len(b) > 3000 { // a cookie's room; the archive is still in the marketplace's log
		return
	}
	ck := c.cookie(r, archivedCookie, "/journeys")
	ck.Value, ck.MaxAge = base64.RawURLEncoding.EncodeToString(b), 300
	http.SetCookie(w, ck)
}

// takeArchived reads and clears what putArchived kept, if anything.
func (c *console) takeArchived(w http.ResponseWriter, r *http.Request) *meshapi.StopWorkerOut {
	ck, err := r.Cookie(archivedCookie)
	if err != nil {
		return nil
	}
	c.clearArchived(w, r)
	var out meshapi.StopWorkerOut
	b, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil || json.Unmarshal(b, &out) != nil || out.Archive == "" {
		return nil
	}
	return &out
}

// clearArchived forgets what putArchived kept.
func (c *console) clearArchived(w http.ResponseWriter, r *http.Request) {
	ck := c.cookie(r, archivedCookie, "/journeys")
	ck.MaxAge = -1
	http.SetCookie(w, ck)
}

// listJourneys renders the journeys page, with the archive a stop just
// wrote.
func (c *console) listJourneys(w http.ResponseWriter, r *http.Request, archived *meshapi.StopWorkerOut) {
	d := journeysData{State: r.URL.Query().Get("state"), States: meshapi.JourneyStates, Off: c.cfg.Journeys == nil, Archived: archived}
	if d.Off {
		c.render(w, r, http.StatusOK, "journeys", "Journeys", d)
		return
	}
	if d.State != "" && !slices.Contains(meshapi.JourneyStates, d.State) {
		c.fail(w, r, http.StatusBadRequest, "Unknown state "+d.State+": pick one from the list.")
		return
	}
	out, err := c.cfg.Journeys.List(r.Context(), sessionOf(r).caller, meshapi.ListJourneysIn{State: d.State, Limit: journeysPerPage, Cursor: r.URL.Query().Get("cursor")})
	if err != nil && archived != nil {
		// The archive is said here once: say it even without the list.
		c.cfg.Logger.ErrorContext(r.Context(), "console: listing journeys after an archive failed", slog.Any("error", err))
		d.ListFailed = true
		c.render(w, r, http.StatusOK, "journeys", "Journeys", d)
		return
	}
	if err != nil {
		c.failJourney(w, r, err)
		return
	}
	d.Journeys, d.Next = out.Journeys, out.NextCursor
	c.render(w, r, http.StatusOK, "journeys", "Journeys", d)
}

// journeyData is a journey's page: its state and a page of its audit log,
// each agent tool call under the action it belongs to.
type journeyData struct {
	meshapi.Journey
	Audit      []auditRow
	NextBefore int64
	Modes      []string
	Live       bool
}

// auditRow is an audit entry as the page lists it.
type auditRow struct {
	meshapi.AuditEntry
	// Nested: an agent's tool call, shown under its action.
	Nested bool
}

func (c *console) journey(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Journeys == nil {
		c.fail(w, r, http.StatusNotFound, "The orchestrator has no marketplace to ask (--marketplace-url): journeys are not shown.")
		return
	}
	caller, id := sessionOf(r).caller, chi.URLParam(r, "id")
	var before int64
	if s := r.URL.Query().Get("before"); s != "" {
		var err error
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 1 {
			c.fail(w, r, http.StatusBadRequest, "That page of the audit log does not exist: go back to the journey.")
			return
		}
	}
	j, err := c.cfg.Journeys.State(r.Context(), caller, id)
	if err != nil {
		c.failJourney(w, r, err)
		return
	}
	audit, err := c.cfg.Journeys.Audit(r.Context(), caller, meshapi.JourneyAuditIn{JourneyID: id, Limit: auditPerPage, Before: before})
	if err != nil {
		c.failJourney(w, r, err)
		return
	}
	d := journeyData{Journey: j, NextBefore: audit.NextBefore, Modes: stopModes, Live: j.State == "starting" || j.State == "active" || j.State == "orphaned"}
	d.Audit = auditRows(audit.Entries)
	c.render(w, r, http.StatusOK, "journey", "Journey "+j.JourneyID, d)
}

// auditRows orders a page of the audit log (newest first) for reading: an
// agent's tool calls, written after their action, follow it in the order
// they were made. A tool call whose action is on another page stays where
// it is.
func auditRows(entries []meshapi.AuditEntry) []auditRow {
	onPage := map[int64]bool{}
	children := map[int64][]meshapi.AuditEntry{}
	for _, e := range entries {
		onPage[e.ID] = true
	}
	for _, e := range slices.Backward(entries) {
		if e.ParentID != 0 && onPage[e.ParentID] {
			children[e.ParentID] = append(children[e.ParentID], e)
		}
	}
	rows := make([]auditRow, 0, len(entries))
	for _, e := range entries {
		if e.ParentID != 0 && onPage[e.ParentID] {
			continue
		}
		rows = append(rows, auditRow{AuditEntry: e, Nested: e.ParentID != 0})
		for _, child := range children[e.ID] {
			rows = append(rows, auditRow{AuditEntry: child, Nested: true})
		}
	}
	return rows
}

// stopJourney stops a journey's worker, keeping, archiving or deleting its
// workspace, and shows the journey again (the journeys, once deleted or
// archived, with the archive's path and digest).
func (c *console) stopJourney(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Journeys == nil {
		c.fail(w, r, http.StatusNotFound, "The orchestrator has no marketplace to ask (--marketplace-url).")
		return
	}
	id, mode := chi.URLParam(r, "id"), r.PostFormValue("workspace")
	if !slices.Contains(stopModes, mode) {
		c.fail(w, r, http.StatusBadRequest, "Choose what becomes of the workspace: keep, archive or delete.")
		return
	}
	out, err := c.cfg.Journeys.Stop(r.Context(), sessionOf(r).caller, meshapi.StopWorkerIn{JourneyID: id, Workspace: mode})
	if err != nil {
		c.failJourney(w, r, err)
		return
	}
	switch mode {
	case "delete":
		// Nothing of the journey is left to show.
		http.Redirect(w, r, "/journeys", http.StatusSeeOther)
	case "archive":
		// Nothing of the journey is left but its archive, whose path and
		// digest the journeys page says once.
		c.putArchived(w, r, out)
		http.Redirect(w, r, "/journeys", http.StatusSeeOther)
	default:
		http.Redirect(w, r, "/journeys/"+url.PathEscape(id), http.StatusSeeOther)
	}
}

// failJourney shows a marketplace error: its message when the marketplace
// meant it for the caller, else a plain one (logged).
func (c *console) failJourney(w http.ResponseWriter, r *http.Request, err error) {
	var e *meshapi.Error
	if !errors.As(err, &e) {
		c.cfg.Logger.ErrorContext(r.Context(), "console: the marketplace did not answer", slog.String("path", r.URL.Path), slog.Any("error", err))
		c.fail(w, r, http.StatusBadGateway, "The marketplace did not answer; the orchestrator logged why. Try again in a moment.")
		return
	}
	switch status := meshapi.HTTPStatus(e.Code); e.Code {
	case meshapi.CodeNotFound:
		c.fail(w, r, status, "No such journey for you: it may belong to another caller. Go back to the journeys.")
	case meshapi.CodeInvalidArgument, meshapi.CodeConflict:
		c.fail(w, r, status, e.Message)
	default:
		// Its message may be about the orchestrator's own access (not a
		// delegate, say): for the operator's log, not for the caller.
		c.cfg.Logger.ErrorContext(r.Context(), "console: the marketplace refused", slog.String("path", r.URL.Path), slog.String("code", string(e.Code)), slog.String("error", e.Message))
		c.fail(w, r, http.StatusBadGateway, "The marketplace could not do it; the orchestrator logged why. Try again, or ask its operator.")
	}
}
