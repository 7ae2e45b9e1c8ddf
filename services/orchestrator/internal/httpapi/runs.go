package httpapi

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/runstate"
	"github.com/meshwork/meshwork/services/orchestrator/internal/store"
)

func (a *API) listPipelines(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.PipelineList{Pipelines: a.eng.Pipelines()})
}

type startBody struct {
	Pipeline string         `json:"pipeline"`
	Inputs   map[string]any `json:"inputs"`
	Thread   string         `json:"thread"`
}

func (a *API) startRun(w http.ResponseWriter, r *http.Request) {
	var body startBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	if body.Pipeline == "" {
		invalidf(w, "pipeline is required: one of GET /v1/pipelines")
		return
	}
	if hasNUL(w, "thread", body.Thread) {
		return
	}
	run, err := a.eng.StartRun(r.Context(), engine.StartRequest{Pipeline: body.Pipeline, Inputs: body.Inputs, Thread: body.Thread, Caller: callerFrom(r.Context())})
	a.started(w, r, run, err)
}

// reply answers a request with what its operation returned: 200 with v,
// or the error.
func (a *API) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// started answers a request that started a run (a start or a fork): 201
// with the run and its Location, or the error.
func (a *API) started(w http.ResponseWriter, r *http.Request, run api.Run, err error) {
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.metrics.RunStarted(run.Pipeline, "http")
	w.Header().Set("Location", "/v1/runs/"+run.ID)
	writeJSON(w, http.StatusCreated, run)
}

func (a *API) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.ListFilter{Pipeline: q.Get("pipeline"), Status: q.Get("status"), Thread: q.Get("thread"), Caller: q.Get("caller"), Before: q.Get("before")}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			invalidf(w, "limit %q must be a number from 1 to %d", s, api.MaxListLimit)
			return
		}
		f.Limit = n
	}
	runs, err := a.eng.ListRuns(r.Context(), f)
	a.reply(w, r, api.RunList{Runs: runs}, err)
}

func (a *API) getRun(w http.ResponseWriter, r *http.Request) {
	v, err := a.eng.GetRun(r.Context(), chi.URLParam(r, "id"))
	a.reply(w, r, v, err)
}

func (a *API) listCheckpoints(w http.ResponseWriter, r *http.Request) {
	cps, err := a.eng.Checkpoints(r.Context(), chi.URLParam(r, "id"))
	a.reply(w, r, api.CheckpointList{Checkpoints: cps}, err)
}

type forkBody struct {
	Seq     *int            `json:"seq"`
	Patch   *runstate.State `json:"patch"`
	Thread  string          `json:"thread"`
	Migrate bool            `json:"migrate"`
}

func (a *API) forkRun(w http.ResponseWriter, r *http.Request) {
	var body forkBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	seq, ok := requiredInt(w, "seq", body.Seq, 0, "the checkpoint to fork from (GET /v1/runs/{id}/checkpoints)")
	if !ok {
		return
	}
	if hasNUL(w, "thread", body.Thread) {
		return
	}
	run, err := a.eng.Fork(r.Context(), engine.ForkRequest{
		RunID: chi.URLParam(r, "id"), Seq: seq, Patch: body.Patch, Thread: body.Thread, Migrate: body.Migrate, Caller: callerFrom(r.Context()),
	})
	a.started(w, r, run, err)
}

func (a *API) cancelRun(w http.ResponseWriter, r *http.Request) {
	var body struct{}
	if !decodeBody(w, r, &body, true) {
		return
	}
	run, err := a.eng.Cancel(r.Context(), chi.URLParam(r, "id"))
	a.reply(w, r, run, err)
}

type resumeRunBody struct {
	Migrate bool `json:"migrate"`
}

func (a *API) resumeRun(w http.ResponseWriter, r *http.Request) {
	var body resumeRunBody
	if !decodeBody(w, r, &body, true) {
		return
	}
	run, err := a.eng.Resume(r.Context(), engine.ResumeRequest{RunID: chi.URLParam(r, "id"), Migrate: body.Migrate, DecidedBy: callerFrom(r.Context())})
	a.reply(w, r, run, err)
}

type resumeInterruptBody struct {
	Value   json.RawMessage `json:"value"`
	Migrate bool            `json:"migrate"`
}

func (a *API) resumeInterrupt(w http.ResponseWriter, r *http.Request) {
	var body resumeInterruptBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	if len(body.Value) == 0 || string(body.Value) == "null" {
		invalidf(w, `value is required: the decision, any JSON, such as "approved"`)
		return
	}
	run, err := a.eng.Resume(r.Context(), engine.ResumeRequest{
		InterruptID: chi.URLParam(r, "id"), Value: body.Value, Migrate: body.Migrate, DecidedBy: callerFrom(r.Context()),
	})
	a.reply(w, r, run, err)
}

type pruneBody struct {
	Keep *int `json:"keep"`
}

func (a *API) pruneRun(w http.ResponseWriter, r *http.Request) {
	var body pruneBody
	if !decodeBody(w, r, &body, false) {
		return
	}
	keep, ok := requiredInt(w, "keep", body.Keep, 1, "how many of the newest checkpoints to keep")
	if !ok {
		return
	}
	n, err := a.eng.Prune(r.Context(), chi.URLParam(r, "id"), keep)
	a.reply(w, r, api.PruneResult{Deleted: n}, err)
}

// requiredInt returns the named body field's value, or writes a 400 and
// returns false when it is missing or not from lo to math.MaxInt32 (the
// store's integer); what says what the field means.
func requiredInt(w http.ResponseWriter, name string, v *int, lo int, what string) (int, bool) {
	switch {
	case v == nil:
		invalidf(w, "%s is required: %s", name, what)
		return 0, false
	case *v < lo || *v > math.MaxInt32:
		invalidf(w, "%s %d must be from %d to %d: %s", name, *v, lo, math.MaxInt32, what)
		return 0, false
	}
	return *v, true
}

// hasNUL writes a 400 and returns true when the named value holds a NUL
// character, which Postgres refuses in text and jsonb.
func hasNUL(w http.ResponseWriter, name, value string) bool {
	if !strings.ContainsRune(value, 0) {
		return false
	}
	invalidf(w, "%s must not contain a NUL character (U+0000)", name)
	return true
}
