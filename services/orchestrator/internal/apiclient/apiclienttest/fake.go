// Package apiclienttest is a fake of the orchestrator's HTTP API, for tests
// of its clients (apiclient, meshctl) that need no database.
//
// The fake serves the routes and JSON shapes of the /v1 contract from canned
// data held in memory: pipelines, run views, checkpoints and scripted event
// streams (which can drop a connection part way). It records every request.
// Actions change its data in the crudest way that keeps a client's view
// consistent (a cancel sets the status, a resume of an interrupt marks it
// resumed); it knows none of the engine's rules. End-to-end tests against the
// real server (httpapi) check those.
package apiclienttest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
)

// Fake is a fake orchestrator API on an httptest server.
type Fake struct {
	// URL is the server's base URL.
	URL string
	// Token is the bearer token the fake requires; empty requires none.
	Token string

	mu          sync.Mutex
	pipelines   []apiclient.Pipeline
	runs        map[string]*api.RunView
	checkpoints map[string][]api.Checkpoint
	streams     map[string]*Stream
	next        []api.RunView
	failures    map[string]apiclient.Error
	workspaces  map[string]Workspace
	requests    []Request
}

// Workspace is what GET /v1/runs/{id}/nodes/{node}/workspace answers.
type Workspace struct {
	Content []byte
	Journey string
	Commit  string
	// Digest is the Repr-Digest header; empty sends Content's.
	Digest string
}

// Request is a request the fake got.
type Request struct {
	Method string
	Path   string
	Query  string
	Auth   string
	Body   string
}

// Stream scripts the event stream of a run. Every connection gets the
// script's events in order, without the checkpoints at or before its after
// parameter but with every attempt again, as the real server does.
type Stream struct {
	// Events are the run's events; the last is normally of type "run",
	// after which the fake ends the stream.
	Events []api.Event
	// Drops lists, by connection, after how many events the fake cuts the
	// connection: it writes half an event and aborts. Connections past the
	// list get the whole script.
	Drops []int
	// Indent sends each event's JSON over several data lines.
	Indent bool
	// Hold keeps a connection open after the script, as a run that goes
	// on would, until the client goes away.
	Hold bool

	afters []string
}

// New starts a fake, closed when the test ends.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{
		runs:        map[string]*api.RunView{},
		checkpoints: map[string][]api.Checkpoint{},
		streams:     map[string]*Stream{},
		failures:    map[string]apiclient.Error{},
		workspaces:  map[string]Workspace{},
	}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// AddPipeline adds a pipeline to the catalog.
func (f *Fake) AddPipeline(p apiclient.Pipeline) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pipelines = append(f.pipelines, p)
}

// AddRun adds a run as GET /v1/runs/{id} returns it.
func (f *Fake) AddRun(v api.RunView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs[v.ID] = &v
}

// NextRun queues the run the next start or fork creates: its row is the
// answer, and the view what GET answers after. A start or fork with none
// queued fails.
func (f *Fake) NextRun(v api.RunView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = append(f.next, v)
}

// SetCheckpoints sets a run's checkpoints.
func (f *Fake) SetCheckpoints(runID string, cps []api.Checkpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checkpoints[runID] = cps
}

// SetStream scripts a run's event stream.
func (f *Fake) SetStream(runID string, s *Stream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams[runID] = s
}

// SetWorkspace sets what GET /v1/runs/{id}/nodes/{node}/workspace answers
// (whatever the format asked); a node without one is a 404.
func (f *Fake) SetWorkspace(runID, node string, ws Workspace) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workspaces[runID+"/"+node] = ws
}

// Fail makes the fake answer method and path (such as "/v1/runs") with an
// error.
func (f *Fake) Fail(method, path string, e apiclient.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures[method+" "+path] = e
}

// Run returns a run as the fake holds it now.
func (f *Fake) Run(id string) api.RunView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.runs[id]
}

// Requests returns the requests the fake got, in order.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

// LastRequest returns the last request to method and path, and whether
// there was one.
func (f *Fake) LastRequest(method, path string) (Request, bool) {
	reqs := f.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Method == method && reqs[i].Path == path {
			return reqs[i], true
		}
	}
	return Request{}, false
}

// CheckBody fails t unless the last request to method and path sent want
// as its body.
func (f *Fake) CheckBody(t testing.TB, method, path, want string) {
	t.Helper()
	r, ok := f.LastRequest(method, path)
	if !ok {
		t.Fatalf("no %s %s", method, path)
	}
	if r.Body != want {
		t.Errorf("%s %s body:\n got %s\nwant %s", method, path, r.Body, want)
	}
}

// StreamAfters returns the after parameter of each connection to a run's
// event stream ("" when absent).
func (f *Fake) StreamAfters(runID string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.streams[runID]; s != nil {
		return slices.Clone(s.afters)
	}
	return nil
}

func (f *Fake) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pipelines", f.listPipelines)
	mux.HandleFunc("POST /v1/runs", f.startRun)
	mux.HandleFunc("GET /v1/runs", f.listRuns)
	mux.HandleFunc("GET /v1/runs/{id}", onRun(f, false, f.getRun))
	mux.HandleFunc("GET /v1/runs/{id}/checkpoints", onRun(f, false, f.listCheckpoints))
	mux.HandleFunc("POST /v1/runs/{id}/fork", onRun(f, false, f.fork))
	mux.HandleFunc("POST /v1/runs/{id}/cancel", onRun(f, true, f.cancel))
	mux.HandleFunc("POST /v1/runs/{id}/resume", onRun(f, true, f.resumeRun))
	mux.HandleFunc("POST /v1/interrupts/{id}/resume", f.resumeInterrupt)
	mux.HandleFunc("POST /v1/runs/{id}/prune", onRun(f, false, f.prune))
	mux.HandleFunc("GET /v1/runs/{id}/events", f.events)
	mux.HandleFunc("GET /v1/runs/{id}/nodes/{node}/workspace", f.workspace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization"), Body: string(body)})
		failure, failing := f.failures[r.Method+" "+r.URL.Path]
		f.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		switch {
		case f.Token != "" && r.Header.Get("Authorization") != "Bearer "+f.Token:
			writeError(w, http.StatusUnauthorized, "unauthenticated", "missing or wrong bearer token")
		case failing:
			writeError(w, failure.Status, failure.Code, failure.Message)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// decode reads a JSON body strictly, as the real server does: an empty
// body is refused unless the route's body is optional (a run's cancel or
// resume), and then leaves v as it is.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && (!optional || !errors.Is(err, io.EOF)) {
		writeError(w, http.StatusBadRequest, "invalid_argument", "decoding the request: "+err.Error())
		return false
	}
	return true
}

func (f *Fake) listPipelines(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"pipelines": f.pipelines})
}

func (f *Fake) startRun(w http.ResponseWriter, r *http.Request) {
	var req api.StartRequest
	if !decode(w, r, &req, false) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	found := false
	for _, p := range f.pipelines {
		names = append(names, p.Name)
		found = found || p.Name == req.Pipeline
	}
	if !found {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("pipeline %q: not found (known: %s)", req.Pipeline, strings.Join(names, ", ")))
		return
	}
	v, ok := f.takeNext(w)
	if !ok {
		return
	}
	v.Pipeline = req.Pipeline
	if v.Inputs == nil {
		v.Inputs = req.Inputs
	}
	f.runs[v.ID] = &v
	writeJSON(w, http.StatusCreated, v.Run)
}

func (f *Fake) takeNext(w http.ResponseWriter) (api.RunView, bool) {
	if len(f.next) == 0 {
		writeError(w, http.StatusInternalServerError, "internal", "apiclienttest: no run queued with NextRun")
		return api.RunView{}, false
	}
	v := f.next[0]
	f.next = f.next[1:]
	return v, true
}

func (f *Fake) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := api.DefaultListLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "invalid_argument", "limit must be a number")
			return
		}
		limit = n
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var runs []api.Run
	for _, v := range f.runs {
		runs = append(runs, v.Run)
	}
	slices.SortFunc(runs, func(a, b api.Run) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	out := []api.Run{}
	before := q.Get("before")
	for _, run := range runs {
		if before != "" {
			if run.ID == before {
				before = ""
			}
			continue
		}
		if match(q.Get("pipeline"), run.Pipeline) && match(q.Get("status"), run.Status) && match(q.Get("thread"), run.Thread) && len(out) < limit {
			out = append(out, run)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

func match(want, got string) bool { return want == "" || want == got }

// run returns the run of the request's {id}, or answers 404.
func (f *Fake) run(w http.ResponseWriter, r *http.Request) *api.RunView {
	v := f.runs[r.PathValue("id")]
	if v == nil {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("run %q: not found", r.PathValue("id")))
	}
	return v
}

// onRun serves a route of one run: it decodes a POST's body into a B
// (decode; optional says whether it may be empty), and calls h under the
// fake's lock with the run of the path's {id}, or answers 404.
func onRun[B any](f *Fake, optional bool, h func(w http.ResponseWriter, req B, v *api.RunView)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req B
		if r.Method == http.MethodPost && !decode(w, r, &req, optional) {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if v := f.run(w, r); v != nil {
			h(w, req, v)
		}
	}
}

func (f *Fake) getRun(w http.ResponseWriter, _ struct{}, v *api.RunView) {
	writeJSON(w, http.StatusOK, v)
}

func (f *Fake) listCheckpoints(w http.ResponseWriter, _ struct{}, v *api.RunView) {
	cps := f.checkpoints[v.ID]
	if cps == nil {
		cps = []api.Checkpoint{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"checkpoints": cps})
}

func (f *Fake) fork(w http.ResponseWriter, req apiclient.ForkRequest, src *api.RunView) {
	v, ok := f.takeNext(w)
	if !ok {
		return
	}
	seq := req.Seq
	v.Pipeline, v.ForkedFromRun, v.ForkedFromSeq = src.Pipeline, src.ID, &seq
	f.runs[v.ID] = &v
	writeJSON(w, http.StatusCreated, v.Run)
}

func (f *Fake) cancel(w http.ResponseWriter, _ struct{}, v *api.RunView) {
	if v.Status != "running" && v.Status != "waiting" {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("conflict: run %s already %s", v.ID, v.Status))
		return
	}
	v.Status, v.Error = "cancelled", "cancelled"
	writeJSON(w, http.StatusOK, v.Run)
}

type resumeRunBody struct {
	Migrate bool `json:"migrate"`
}

func (f *Fake) resumeRun(w http.ResponseWriter, _ resumeRunBody, v *api.RunView) {
	if v.Status != "failed" {
		writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("conflict: run %s is %s; only a failed run can be resumed (an approval is resumed by its interrupt id)", v.ID, v.Status))
		return
	}
	v.Status, v.Error = "running", ""
	writeJSON(w, http.StatusOK, v.Run)
}

func (f *Fake) resumeInterrupt(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Value   json.RawMessage `json:"value"`
		Migrate bool            `json:"migrate"`
	}
	if !decode(w, r, &req, false) {
		return
	}
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.runs {
		for i := range v.Interrupts {
			in := &v.Interrupts[i]
			if in.ID != id {
				continue
			}
			if in.Status != "pending" {
				writeError(w, http.StatusConflict, "conflict", fmt.Sprintf("conflict: interrupt %s was already %s", id, in.Status))
				return
			}
			now := time.Now()
			in.Status, in.Value, in.ResumedAt = "resumed", req.Value, &now
			v.Status = "running"
			writeJSON(w, http.StatusOK, v.Run)
			return
		}
	}
	writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("interrupt %q: not found", id))
}

type pruneBody struct {
	Keep int `json:"keep"`
}

func (f *Fake) prune(w http.ResponseWriter, req pruneBody, v *api.RunView) {
	if req.Keep < 1 {
		writeError(w, http.StatusBadRequest, "invalid_argument", "keep must be at least 1")
		return
	}
	cps := f.checkpoints[v.ID]
	deleted := max(0, len(cps)-req.Keep)
	f.checkpoints[v.ID] = cps[deleted:]
	writeJSON(w, http.StatusOK, map[string]any{"deleted": deleted})
}

func (f *Fake) workspace(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.run(w, r)
	if v == nil {
		return
	}
	ws, ok := f.workspaces[v.ID+"/"+r.PathValue("node")]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "apiclienttest: no workspace set for node "+r.PathValue("node"))
		return
	}
	digest := ws.Digest
	if digest == "" {
		digest = api.ReprDigest(ws.Content)
	}
	w.Header().Set("Repr-Digest", digest)
	w.Header().Set("Meshwork-Journey", ws.Journey)
	if ws.Commit != "" {
		w.Header().Set("Meshwork-Commit", ws.Commit)
	}
	_, _ = w.Write(ws.Content)
}

func (f *Fake) events(w http.ResponseWriter, r *http.Request) {
	after := -1
	if s := r.URL.Query().Get("after"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_argument", "after must be a number")
			return
		}
		after = n
	}
	f.mu.Lock()
	if f.run(w, r) == nil {
		f.mu.Unlock()
		return
	}
	s := f.streams[r.PathValue("id")]
	if s == nil {
		f.mu.Unlock()
		writeError(w, http.StatusInternalServerError, "internal", "apiclienttest: no stream scripted with SetStream")
		return
	}
	conn := len(s.afters)
	s.afters = append(s.afters, r.URL.Query().Get("after"))
	drop := -1
	if conn < len(s.Drops) {
		drop = s.Drops[conn]
	}
	events, indent, hold := slices.Clone(s.Events), s.Indent, s.Hold
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flush := func() { _ = http.NewResponseController(w).Flush() } // the client may be gone
	_, _ = fmt.Fprint(w, ": connected\n\n")
	sent := 0
	for _, ev := range events {
		if ev.Type == "checkpoint" && ev.Seq <= after {
			continue
		}
		if sent == drop {
			_, _ = fmt.Fprintf(w, "event: %s\ndata: {\"type\":\"%s\",", ev.Type, ev.Type)
			flush()
			panic(http.ErrAbortHandler) // cuts the connection mid-event
		}
		writeEvent(w, ev, indent)
		_, _ = fmt.Fprint(w, ": heartbeat\n\n")
		flush()
		sent++
	}
	if hold {
		<-r.Context().Done()
	}
}

// writeEvent writes one event as the contract has it: "event: <type>" and
// "data: <api.Event JSON>".
func writeEvent(w io.Writer, ev api.Event, indent bool) {
	var b []byte
	if indent {
		b, _ = json.MarshalIndent(ev, "", "  ")
	} else {
		b, _ = json.Marshal(ev)
	}
	var msg strings.Builder
	fmt.Fprintf(&msg, "event: %s\n", ev.Type)
	for line := range strings.SplitSeq(string(b), "\n") {
		fmt.Fprintf(&msg, "data: %s\n", line)
	}
	msg.WriteString("\n")
	_, _ = io.WriteString(w, msg.String()) // the client may be gone
}
