// Package console is the orchestrator's web console: runs, a run's graph,
// nodes, outputs and patch, the approvals a caller may decide, and the
// caller's marketplace journeys with their audit logs, served
// as HTML beside the API on the same listener for the same callers.
//
// A caller signs in with their API token; the session is a signed cookie
// (HttpOnly, SameSite=Strict, 12 hours). Every change is a POST carrying
// the session's CSRF token. Pages are server-rendered by html/template, so
// whatever agents, repositories or callers wrote is shown as text; the
// Content-Security-Policy allows no script, style or image from anywhere
// but the console itself, and the console needs no JavaScript.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/pkg/bearer"
	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/httpapi"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// contentSecurityPolicy allows the console's own stylesheet and script
// (static/console.js: local times, a running run's page kept live) and
// nothing else: no inline script, no other origin, no framing. connect-src
// is the run's event stream and the page's own refresh.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Config configures the console.
type Config struct {
	Engine *engine.Engine
	Tokens *bearer.Set
	// Admins see and act on every caller's runs, as in the API.
	Admins []string
	// TraceURL, when set, links a run to its trace: "{trace_id}" in it is
	// replaced, as in a Grafana explore URL. Defaults to no link.
	TraceURL string
	Logger   *slog.Logger
	// Journeys are the signed-in caller's marketplace journeys; nil when
	// the orchestrator has no marketplace, which the journeys page says.
	Journeys Journeys
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// SecureCookies marks the console's cookies Secure, for a console
	// served over TLS by a proxy in front of it (the orchestrator itself
	// serves plain HTTP; a request that came over TLS gets Secure cookies
	// anyway).
	SecureCookies bool
}

type console struct {
	cfg   Config
	pages map[string]*template.Template
}

// SessionCaller returns the caller of a request that carries a valid
// console session, for the API's event stream: a browser's EventSource
// cannot send a bearer token, only the session cookie (SameSite=Strict, so
// never on another site's request).
func SessionCaller(tokens *bearer.Set, now func() time.Time) func(*http.Request) (string, bool) {
	if now == nil {
		now = time.Now
	}
	return func(r *http.Request) (string, bool) {
		ck, err := r.Cookie(cookieName)
		if err != nil {
			return "", false
		}
		s, ok := parseSession(ck.Value, tokens, now())
		return s.caller, ok
	}
}

// parsePages parses every page's template, each with the layout.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"when":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
		"iso":      func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"duration": duration,
		"usd":      func(v float64) string { return fmt.Sprintf("$%.4f", v) },
		"symbol":   symbol,
		"decision": func(csrf, id string) struct{ CSRF, ID string } { return struct{ CSRF, ID string }{csrf, id} },
	}
	pages := map[string]*template.Template{}
	for _, page := range []string{"signin", "runs", "run", "approvals", "start", "journeys", "journey", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		pages[page] = t
	}
	return pages, nil
}

// New returns the console's handler.
func New(cfg Config) (http.Handler, error) {
	if cfg.Engine == nil || cfg.Tokens == nil {
		return nil, errors.New("console: Engine and Tokens are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &console{cfg: cfg, pages: pages}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	// A POST from another site is refused before anything reads it, the
	// sign-in among them (a page elsewhere could sign a browser in as its
	// own caller): browsers say where a request comes from (Sec-Fetch-Site,
	// Origin), and the forms' CSRF tokens are a second check.
	crossOrigin := http.NewCrossOriginProtection()
	crossOrigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, "This form was sent from another site, so the console did not take it. Open the console and send it from there.")
	}))
	r := chi.NewRouter()
	r.Use(headers, crossOrigin.Handler, c.readForm)
	r.Handle("/static/*", http.StripPrefix("/static/", http.FileServerFS(static)))
	r.Get("/signin", c.signinPage)
	r.Post("/signin", c.signin)
	r.Group(func(r chi.Router) {
		r.Use(c.requireSession)
		r.Get("/", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/runs", http.StatusSeeOther) })
		r.Get("/runs", c.runs)
		r.Get("/runs/{id}", c.run)
		r.Get("/runs/{id}/patch", c.patch)
		r.Get("/runs/{id}/workspace", c.workspace)
		r.Get("/approvals", c.approvals)
		r.Get("/start", c.startList)
		r.Get("/start/{pipeline}", c.startForm)
		r.Post("/start/{pipeline}", c.start)
		r.Post("/signout", c.signout)
		r.Post("/runs/{id}/cancel", c.cancel)
		r.Post("/runs/{id}/fork", c.fork)
		r.Post("/runs/{id}/resume", c.resumeRun)
		r.Post("/interrupts/{id}/resume", c.resume)
		r.Get("/journeys", c.journeys)
		r.Get("/journeys/{id}", c.journey)
		r.Post("/journeys/{id}/stop", c.stopJourney)
	})
	return r, nil
}

// headers sets the security headers of every console response.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// maxFormBytes bounds a console form, as httpapi.MaxBodyBytes bounds an
// API request.
const maxFormBytes = 1 << 20

// readForm reads a POST's form, at most maxFormBytes of it, before any
// handler asks for a value: the console's forms are URL-encoded, and any
// other body (a multipart one would be spooled to temporary files, whatever
// its size) is refused.
func (c *console) readForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "" {
			if mt, _, _ := mime.ParseMediaType(ct); mt != "application/x-www-form-urlencoded" {
				c.fail(w, r, http.StatusUnsupportedMediaType, "The console takes URL-encoded forms only.")
				return
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				c.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("The form is larger than the %d bytes the console takes.", maxFormBytes))
				return
			}
			c.fail(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		next.ServeHTTP(w, r)
	})
}

type sessionKey struct{}

// requireSession lets signed-in callers through with their viewer in the
// context (the engine shows them what the API would), sends the others to
// sign in, and refuses a POST whose CSRF token is not the session's.
func (c *console) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s session
		ok := false
		if ck, err := r.Cookie(cookieName); err == nil {
			s, ok = parseSession(ck.Value, c.cfg.Tokens, c.cfg.Now())
		}
		if !ok {
			if r.Method != http.MethodGet {
				c.fail(w, r, http.StatusForbidden, "Your session has ended: sign in again.")
				return
			}
			http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost && !s.checkCSRF(r.PostFormValue("csrf")) {
			c.fail(w, r, http.StatusForbidden, "This form is out of date or did not come from the console: reload the page and try again.")
			return
		}
		ctx := context.WithValue(r.Context(), sessionKey{}, s)
		ctx = engine.WithViewer(ctx, engine.Viewer{Caller: s.caller, Admin: slices.Contains(c.cfg.Admins, s.caller)})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

func sessionOf(r *http.Request) session {
	s, _ := r.Context().Value(sessionKey{}).(session)
	return s
}

// page is what every template gets.
type page struct {
	Title  string
	Caller string
	CSRF   string
	Data   any
}

func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	s := sessionOf(r)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	p := page{Title: title, Caller: s.caller, Data: data}
	if s.caller != "" {
		p.CSRF = s.csrf()
	}
	if err := c.pages[name].Execute(w, p); err != nil {
		c.cfg.Logger.WarnContext(r.Context(), "console: rendering a page failed", slog.String("page", name), slog.Any("error", err))
	}
}

// fail shows an error page that says what to do next.
func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", http.StatusText(status), msg)
}

// failErr shows an engine error: its message when it is meant for callers,
// else a plain one (logged).
func (c *console) failErr(w http.ResponseWriter, r *http.Request, err error) {
	switch code := engine.ErrorCode(err); code {
	case meshapi.CodeNotFound:
		c.fail(w, r, meshapi.HTTPStatus(code), "No such run or approval for you: it may belong to another caller. Go back to the runs.")
	case meshapi.CodeInvalidArgument, meshapi.CodePermissionDenied, meshapi.CodeConflict, meshapi.CodePipelineChanged,
		meshapi.CodeUnavailable, meshapi.CodeResourceExhausted:
		c.fail(w, r, meshapi.HTTPStatus(code), err.Error())
	default:
		c.cfg.Logger.ErrorContext(r.Context(), "console: request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		c.fail(w, r, http.StatusInternalServerError, "Something failed on the orchestrator; it logged the details. Try again.")
	}
}

func (c *console) signinPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "signin", "Sign in", struct{ Next, Error string }{Next: safeNext(r.URL.Query().Get("next"))})
}

func (c *console) signin(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	caller, hash, ok := c.cfg.Tokens.Lookup(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		c.render(w, r, http.StatusUnauthorized, "signin", "Sign in", struct{ Next, Error string }{Next: next, Error: "That token is not one of the orchestrator's callers'. Check it and try again."})
		return
	}
	c.setSession(w, r, newSession(caller, hash, c.cfg.Now()))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *console) signout(w http.ResponseWriter, r *http.Request) {
	c.setSession(w, r, session{})
	c.clearArchived(w, r) // the next caller on this browser must not see it
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// safeNext keeps a redirect after sign-in on the console: a path, never
// another origin. A browser drops tabs and newlines from a URL and reads a
// backslash as a slash, so a path holding any control character or
// backslash is refused, not only one that starts with "//".
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil ||
		!strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/runs"
	}
	return next
}

// runsData is the runs page.
type runsData struct {
	Runs     []api.Run
	Costs    map[string]float64 // by run; a run that cost nothing is absent
	Status   string
	Pipeline string
	Statuses []string
	Next     string // the id to page from, when there may be more
}

const runsPerPage = 50

func (c *console) runs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.ListFilter{Status: q.Get("status"), Pipeline: q.Get("pipeline"), Before: q.Get("before"), Limit: runsPerPage}
	if f.Status != "" && !slices.Contains(api.RunStatuses(), f.Status) {
		c.fail(w, r, http.StatusBadRequest, "Unknown status "+f.Status+": pick one from the list.")
		return
	}
	runs, err := c.cfg.Engine.ListRuns(r.Context(), f)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	costs, err := c.cfg.Engine.RunCosts(r.Context(), runs)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d := runsData{Runs: runs, Costs: costs, Status: f.Status, Pipeline: f.Pipeline, Statuses: api.RunStatuses()}
	if len(runs) == runsPerPage {
		d.Next = runs[len(runs)-1].ID
	}
	c.render(w, r, http.StatusOK, "runs", "Runs", d)
}

// runData is a run's page.
type runData struct {
	api.RunView
	Graph    graph
	Pending  []store.Interrupt
	TraceURL string
	Live     bool
	// Following: the page follows the run over its event stream (a
	// running run; a waiting one changes by a decision, which reloads it).
	Following bool
	// Checkpoints are the run's, newest first, each one a place to fork
	// from.
	Checkpoints []api.Checkpoint
	// Patch and PatchOmits are the patch shown, PatchNode's: the run's,
	// or another node's (?patch=).
	Patch      string
	PatchOmits []string
	// SideBySide is Patch laid out side by side; nil when the patch does
	// not parse, which the page then shows as text only.
	SideBySide *sideDiff
	// AgentEvents are what the run's agents did last, newest first.
	AgentEvents []store.AgentEvent
	// Timeline is the run's attempts in time; NodeCosts what each node
	// cost, all its attempts together.
	Timeline  timeline
	NodeCosts map[string]float64
}

func (c *console) run(w http.ResponseWriter, r *http.Request) {
	v, err := c.cfg.Engine.GetRun(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d := runData{
		RunView: v, Graph: layout(v.Nodes), Live: v.Status == runstate.RunRunning || v.Status == runstate.RunWaiting,
		Following: v.Status == runstate.RunRunning,
	}
	d.Timeline, d.NodeCosts = makeTimeline(v, c.cfg.Now()), map[string]float64{}
	for _, a := range v.Attempts {
		d.NodeCosts[a.NodeID] += a.CostUSD
	}
	for _, in := range v.Interrupts {
		if in.Status == "pending" {
			d.Pending = append(d.Pending, in)
		}
	}
	if c.cfg.TraceURL != "" && v.TraceID != "" {
		d.TraceURL = strings.ReplaceAll(c.cfg.TraceURL, "{trace_id}", url.QueryEscape(v.TraceID))
	}
	if node := r.URL.Query().Get("patch"); node != "" {
		// Another node's patch than the run's.
		d.PatchNode = node
		if d.Patch, d.PatchOmits, _ = v.NodePatch(node); d.Patch == "" && len(d.PatchOmits) == 0 {
			c.fail(w, r, http.StatusNotFound, "Node "+node+" of this run has no patch.")
			return
		}
	} else {
		d.Patch, d.PatchOmits, _ = v.NodePatch(v.PatchNode)
	}
	if d.Patch != "" {
		d.SideBySide, _ = sideBySide(d.Patch)
	}
	if d.AgentEvents, err = c.cfg.Engine.RecentAgentEvents(r.Context(), v.ID, maxAgentEventsShown); err != nil {
		c.failErr(w, r, err)
		return
	}
	d.Checkpoints, err = c.cfg.Engine.RecentCheckpoints(r.Context(), v.ID, maxCheckpointsShown)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "run", "Run "+v.ID, d)
}

// maxAgentEventsShown bounds the agent events a run's page lists (the
// newest); static/console.js keeps the live list to as many.
const maxAgentEventsShown = 20

// maxCheckpointsShown bounds the checkpoints a run's page lists (the
// newest); older ones are forked from with meshctl or the API.
const maxCheckpointsShown = 50

// fork starts a new run from one of the run's checkpoints, with an
// optional state patch (JSON: new inputs, node states to run again), and
// shows it. A refused patch comes back with the engine's message.
func (c *console) fork(w http.ResponseWriter, r *http.Request) {
	seq, err := strconv.Atoi(r.PostFormValue("seq"))
	if err != nil || seq < 0 || seq > math.MaxInt32 {
		c.fail(w, r, http.StatusBadRequest, "Choose a checkpoint to fork from.")
		return
	}
	req := engine.ForkRequest{RunID: chi.URLParam(r, "id"), Seq: seq, Caller: sessionOf(r).caller}
	if text := strings.TrimSpace(r.PostFormValue("patch")); text != "" {
		var patch runstate.State
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		err := dec.Decode(&patch)
		if err == nil && dec.More() {
			err = errors.New("more than one JSON value")
		}
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, fmt.Sprintf(`The patch is not a state patch (JSON such as {"inputs": {"task": "…"}}, or {"nodes": {"review": {"status": "pending"}}} to run a node again): %v`, err))
			return
		}
		req.Patch = &patch
	}
	run, err := c.cfg.Engine.Fork(r.Context(), req)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
}

// patch downloads the run's patch, or a node's (?node=).
func (c *console) patch(w http.ResponseWriter, r *http.Request) {
	v, err := c.cfg.Engine.GetRun(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	name, node := "run-"+v.ID, v.PatchNode
	if n := r.URL.Query().Get("node"); n != "" {
		name, node = "run-"+v.ID+"-"+n, n
	}
	patch, _, _ := v.NodePatch(node)
	if patch == "" {
		c.fail(w, r, http.StatusNotFound, "No patch here (yet).")
		return
	}
	w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
	// Node ids are [a-z0-9_] (the pipeline's compiler checks them), and an
	// unknown one has no patch: the file name needs no quoting.
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.patch"`)
	_, _ = w.Write([]byte(patch))
}

// workspace serves the workspace that holds a node's change, whole (?node=,
// &format=bundle by default, or tar), as GET
// /v1/runs/{id}/nodes/{node}/workspace does, with a console's error page.
func (c *console) workspace(w http.ResponseWriter, r *http.Request) {
	if err := c.cfg.Engine.ExportWorkspace(r.Context(), chi.URLParam(r, "id"), r.URL.Query().Get("node"), r.URL.Query().Get("format"), httpapi.WriteWorkspace(w)); err != nil {
		c.failErr(w, r, err)
	}
}

func (c *console) cancel(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if _, err := c.cfg.Engine.Cancel(r.Context(), id); err != nil {
		c.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(id), http.StatusSeeOther)
}

// resumeRun runs a failed run's failed nodes again, optionally under the
// pipeline's current definition (migrate), and shows the run.
func (c *console) resumeRun(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if _, err := c.cfg.Engine.Resume(r.Context(), engine.ResumeRequest{RunID: id, Migrate: r.PostFormValue("migrate") == "on", DecidedBy: sessionOf(r).caller}); err != nil {
		c.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(id), http.StatusSeeOther)
}

// resume decides an approval: the decision (approve or reject) and the
// comment make its value, "approved" or "rejected", then ": comment".
func (c *console) resume(w http.ResponseWriter, r *http.Request) {
	value := "approved"
	switch r.PostFormValue("decision") {
	case "approve":
	case "reject":
		value = "rejected"
	default:
		c.fail(w, r, http.StatusBadRequest, "Choose approve or reject.")
		return
	}
	if comment := strings.TrimSpace(r.PostFormValue("comment")); comment != "" {
		value += ": " + comment
	}
	run, err := c.cfg.Engine.Resume(r.Context(), engine.ResumeRequest{InterruptID: chi.URLParam(r, "id"), Value: []byte(jsonString(value)), DecidedBy: sessionOf(r).caller})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	if !engine.CanView(r.Context(), run) {
		// A named approver of another caller's run: back to the inbox.
		http.Redirect(w, r, "/approvals", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
}

func (c *console) approvals(w http.ResponseWriter, r *http.Request) {
	list, err := c.cfg.Engine.PendingApprovals(r.Context())
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "approvals", "Approvals", list)
}
