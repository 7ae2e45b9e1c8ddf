package console

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/meshwork/meshwork/pkg/meshapi"
	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/go-chi/chi/v5"

	"github.com/meshwork/meshwork/services/orchestrator/internal/engine"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// field is one input of the start form.
type field struct {
	Name        string
	Type        string // the input's type
	Control     string // text, number, checkbox or json
	Required    bool
	Description string
	Value       string // what the form holds: the default, or what was sent
	Checked     bool
}

// startData is the start form of a pipeline, or the list of pipelines.
type startData struct {
	Pipelines []api.PipelineSummary
	Pipeline  *api.PipelineSummary
	Fields    []field
	Thread    string
	Error     string
}

func (c *console) pipeline(name string) (api.PipelineSummary, bool) {
	for _, p := range c.cfg.Engine.Pipelines() {
		if p.Name == name {
			return p, true
		}
	}
	return api.PipelineSummary{}, false
}

func (c *console) startList(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "start", "Start a run", startData{Pipelines: c.cfg.Engine.Pipelines()})
}

// fields is the form of p's inputs, filled from form when it is set.
func fields(p api.PipelineSummary, form url.Values) []field {
	var out []field
	for _, name := range slices.Sorted(maps.Keys(p.Inputs)) {
		in := p.Inputs[name]
		f := field{Name: name, Type: string(in.Type), Required: in.Required, Description: in.Description}
		switch in.Type {
		case pipeline.TypeNumber:
			f.Control = "number"
		case pipeline.TypeBoolean:
			f.Control = "checkbox"
		case pipeline.TypeObject, pipeline.TypeRepository:
			f.Control = "json"
		default:
			f.Control = "text"
		}
		switch {
		case form != nil:
			f.Value, f.Checked = form.Get("input."+name), form.Get("input."+name) == "true"
		case in.Default != nil && f.Control == "json":
			b, _ := json.Marshal(in.Default)
			f.Value = string(b)
		case in.Default != nil:
			f.Value, f.Checked = jsonText(in.Default), in.Default == true
		}
		out = append(out, f)
	}
	return out
}

// jsonText is a default value as a form shows it.
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (c *console) startForm(w http.ResponseWriter, r *http.Request) {
	p, ok := c.pipeline(chi.URLParam(r, "pipeline"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such pipeline: pick one from the list.")
		return
	}
	c.render(w, r, http.StatusOK, "start", "Start "+p.Name, startData{Pipeline: &p, Fields: fields(p, nil)})
}

// start starts a run from the form: each input as its type reads it, then
// the engine's own checks, whose message the form shows as the API would.
func (c *console) start(w http.ResponseWriter, r *http.Request) {
	p, ok := c.pipeline(chi.URLParam(r, "pipeline"))
	if !ok {
		c.fail(w, r, http.StatusNotFound, "No such pipeline: pick one from the list.")
		return
	}
	again := func(status int, msg string) {
		c.render(w, r, status, "start", "Start "+p.Name, startData{Pipeline: &p, Fields: fields(p, r.PostForm), Thread: r.PostFormValue("thread"), Error: msg})
	}
	inputs := map[string]any{}
	var problems []string
	for _, f := range fields(p, r.PostForm) {
		raw := strings.TrimSpace(f.Value)
		switch {
		case f.Control == "checkbox":
			inputs[f.Name] = f.Checked
		case raw == "":
			// Left out: the pipeline's default, or its "required" error.
		case f.Control == "number":
			n, err := strconv.ParseFloat(raw, 64)
			if err != nil {
				problems = append(problems, "input "+f.Name+": "+strconv.Quote(raw)+" is not a number")
				continue
			}
			inputs[f.Name] = n
		case f.Control == "json":
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				problems = append(problems, "input "+f.Name+": not JSON: "+err.Error())
				continue
			}
			inputs[f.Name] = v
		default:
			inputs[f.Name] = f.Value
		}
	}
	if len(problems) > 0 {
		again(http.StatusBadRequest, strings.Join(problems, "; "))
		return
	}
	run, err := c.cfg.Engine.StartRun(r.Context(), engine.StartRequest{Pipeline: p.Name, Inputs: inputs, Thread: strings.TrimSpace(r.PostFormValue("thread")), Caller: sessionOf(r).caller})
	switch code := engine.ErrorCode(err); {
	case err == nil:
	case code == meshapi.CodeInvalidArgument, code == meshapi.CodeConflict:
		again(http.StatusBadRequest, err.Error())
		return
	default:
		c.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(run.ID), http.StatusSeeOther)
}
