package apiclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"go.uber.org/goleak"

	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient/apiclienttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	runID       = "11111111-1111-4111-8111-111111111111"
	forkID      = "22222222-2222-4222-8222-222222222222"
	interruptID = "33333333-3333-4333-8333-333333333333"
	token       = "s3cret"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type bundle struct {
	fake *apiclienttest.Fake
}

// setup returns a client of a fake API that requires a token, with
// reconnections that do not wait.
func setup(t *testing.T) (*apiclient.Client, bundle) {
	t.Helper()
	f := apiclienttest.New(t)
	f.Token = token
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(hc.CloseIdleConnections)
	c := apiclient.New(f.URL+"/", token, hc)
	c.ReconnectDelay = 0
	return c, bundle{fake: f}
}

func waitingRun() api.RunView {
	return api.RunView{
		Run:    api.Run{ID: runID, Pipeline: "research_pipeline", Thread: runID, Status: "waiting", HeadSeq: 3, CreatedAt: t0, UpdatedAt: t0},
		Inputs: map[string]any{"task": "dinosaurs"},
		Nodes: []api.NodeView{
			{ID: "research", Role: "researcher", Type: "agent", Status: "succeeded", NodeState: api.NodeState{Output: "facts", Attempts: 1, Iteration: 1}},
			{ID: "approve", Type: "approval", Status: "waiting"},
		},
		Outputs:    map[string]string{"research": "facts"},
		Sessions:   map[string]string{"researcher": "sess-1"},
		Interrupts: []api.Interrupt{{ID: interruptID, RunID: runID, NodeID: "approve", Iteration: 1, Status: "pending", CreatedAt: t0}},
	}
}

func TestCalls(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := t.Context()
	b.fake.AddPipeline(apiclient.Pipeline{Name: "research_pipeline", Hash: "abc", Inputs: map[string]api.Input{"task": {Type: api.TypeString, Required: true}}})
	b.fake.AddRun(waitingRun())
	b.fake.SetCheckpoints(runID, []api.Checkpoint{{RunID: runID, Seq: 0}, {RunID: runID, Seq: 1, NodeID: "research"}})

	ps, err := c.Pipelines(ctx)
	if err != nil || len(ps) != 1 || ps[0].Name != "research_pipeline" || ps[0].Inputs["task"].Type != api.TypeString {
		t.Fatalf("Pipelines = %+v, %v", ps, err)
	}

	b.fake.NextRun(api.RunView{Run: api.Run{ID: forkID, Status: "running", CreatedAt: t0.Add(time.Hour)}})
	run, err := c.StartRun(ctx, api.StartRequest{Pipeline: "research_pipeline", Inputs: map[string]any{"task": "x"}, Thread: "t1"})
	if err != nil || run.ID != forkID {
		t.Fatalf("StartRun = %+v, %v", run, err)
	}
	b.fake.CheckBody(t, "POST", "/v1/runs", `{"pipeline":"research_pipeline","inputs":{"task":"x"},"thread":"t1"}`)

	runs, err := c.ListRuns(ctx, apiclient.RunFilter{Status: "waiting", Limit: 5})
	if err != nil || len(runs) != 1 || runs[0].ID != runID {
		t.Fatalf("ListRuns = %+v, %v", runs, err)
	}
	if r, _ := b.fake.LastRequest("GET", "/v1/runs"); r.Query != "limit=5&status=waiting" {
		t.Errorf("ListRuns query = %q", r.Query)
	}

	v, err := c.GetRun(ctx, runID)
	if err != nil || !reflect.DeepEqual(v, waitingRun()) {
		t.Fatalf("GetRun = %+v, %v", v, err)
	}

	cps, err := c.Checkpoints(ctx, runID)
	if err != nil || len(cps) != 2 || cps[1].NodeID != "research" {
		t.Fatalf("Checkpoints = %+v, %v", cps, err)
	}

	b.fake.NextRun(api.RunView{Run: api.Run{ID: "44444444-4444-4444-8444-444444444444", Status: "running"}})
	patch := &api.State{Nodes: map[string]api.NodeState{"research": {Status: "pending"}}}
	fork, err := c.Fork(ctx, runID, apiclient.ForkRequest{Seq: 0, Patch: patch, Migrate: true})
	if err != nil || fork.ForkedFromRun != runID || fork.ForkedFromSeq == nil || *fork.ForkedFromSeq != 0 {
		t.Fatalf("Fork = %+v, %v", fork, err)
	}
	b.fake.CheckBody(t, "POST", "/v1/runs/"+runID+"/fork", `{"seq":0,"patch":{"nodes":{"research":{"output":"","status":"pending","attempts":0,"iteration":0}}},"migrate":true}`)

	run, err = c.ResumeInterrupt(ctx, interruptID, json.RawMessage(`"approved"`), false)
	if err != nil || run.Status != "running" {
		t.Fatalf("ResumeInterrupt = %+v, %v", run, err)
	}
	b.fake.CheckBody(t, "POST", "/v1/interrupts/"+interruptID+"/resume", `{"value":"approved"}`)

	run, err = c.Cancel(ctx, runID)
	if err != nil || run.Status != "cancelled" {
		t.Fatalf("Cancel = %+v, %v", run, err)
	}

	deleted, err := c.Prune(ctx, runID, 1)
	if err != nil || deleted != 1 {
		t.Fatalf("Prune = %d, %v", deleted, err)
	}
	b.fake.CheckBody(t, "POST", "/v1/runs/"+runID+"/prune", `{"keep":1}`)

	for _, r := range b.fake.Requests() {
		if r.Auth != "Bearer "+token {
			t.Errorf("%s %s: Authorization %q", r.Method, r.Path, r.Auth)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()

	t.Run("API", func(t *testing.T) {
		t.Parallel()
		c, b := setup(t)
		_, err := c.ResumeRun(t.Context(), runID, false)
		var apiErr *apiclient.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound || apiErr.Code != "not_found" {
			t.Fatalf("err = %#v", err)
		}
		if got, want := err.Error(), `run "`+runID+`": not found`; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
		b.fake.Token = "other"
		_, err = c.Pipelines(t.Context())
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
			t.Fatalf("err = %#v", err)
		}
	})

	t.Run("NotTheAPI", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "<html>\n<h1>Bad   gateway</h1></html>", http.StatusBadGateway)
		}))
		defer srv.Close()
		hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		defer hc.CloseIdleConnections()
		_, err := apiclient.New(srv.URL, "", hc).Pipelines(t.Context())
		if got, want := err.Error(), "HTTP 502 Bad Gateway: <html> <h1>Bad gateway</h1></html>"; got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		_, err := apiclient.New(srv.URL, "", nil).GetRun(t.Context(), runID)
		var apiErr *apiclient.Error
		if err == nil || errors.As(err, &apiErr) {
			t.Fatalf("err = %#v", err)
		}
		if want := "GET " + srv.URL + "/v1/runs/" + runID + ": dial tcp"; len(err.Error()) < len(want) || err.Error()[:len(want)] != want {
			t.Errorf("Error() = %q, want it to start with %q", err, want)
		}
	})
}

// script is a run's events: it starts, research fails once and then
// succeeds, write succeeds, the run succeeds.
func script() []api.Event {
	return []api.Event{
		{Type: "checkpoint", RunID: runID, Seq: 0, At: t0},
		{Type: "attempt", RunID: runID, NodeID: "research", Attempt: &api.Attempt{ID: 7, NodeID: "research", Iteration: 1, Attempt: 1, Status: "failed", Error: "boom"}, At: t0},
		{Type: "checkpoint", RunID: runID, Seq: 1, NodeID: "research", Nodes: map[string]api.NodeState{"research": {Output: "line 1\nline 2", Status: "succeeded", Attempts: 2, Iteration: 1}}, At: t0},
		{Type: "checkpoint", RunID: runID, Seq: 2, NodeID: "write", Nodes: map[string]api.NodeState{"write": {Output: "report", Status: "succeeded", Attempts: 1, Iteration: 1}}, At: t0},
		{Type: "run", RunID: runID, Seq: 2, Status: "succeeded", At: t0},
	}
}

func collect(t *testing.T, c *apiclient.Client, after int) ([]api.Event, error) {
	t.Helper()
	var got []api.Event
	err := c.Events(t.Context(), runID, after, func(ev api.Event) error {
		got = append(got, ev)
		return nil
	})
	return got, err
}

func TestEvents(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name   string
		after  int
		drops  []int // by connection, after how many events the fake cuts it
		indent bool  // each event's data over several lines
		want   []api.Event
		afters []string // the after parameter of each connection
	}{
		{name: "Whole", after: -1, want: script(), afters: []string{""}},
		{name: "After", after: 1, want: []api.Event{script()[1], script()[3], script()[4]}, afters: []string{"1"}},
		// The first connection drops after the start and the attempt, the
		// second at once; the third runs to the end, with every event once,
		// in order, each connection after the last checkpoint seen.
		{name: "Reconnects", after: -1, drops: []int{2, 0}, indent: true, want: script(), afters: []string{"", "0", "0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, b := setup(t)
			b.fake.AddRun(waitingRun())
			b.fake.SetStream(runID, &apiclienttest.Stream{Events: script(), Drops: tt.drops, Indent: tt.indent})
			got, err := collect(t, c, tt.after)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %+v\nwant %+v", got, tt.want)
			}
			if afters := b.fake.StreamAfters(runID); !reflect.DeepEqual(afters, tt.afters) {
				t.Errorf("afters = %q, want %q", afters, tt.afters)
			}
		})
	}

	t.Run("GivesUp", func(t *testing.T) {
		t.Parallel()
		c, b := setup(t)
		c.Reconnects = 2
		b.fake.AddRun(waitingRun())
		b.fake.SetStream(runID, &apiclienttest.Stream{Events: script(), Drops: []int{1, 0, 0, 0, 0}})
		got, err := collect(t, c, -1)
		if err == nil || len(got) != 1 {
			t.Fatalf("got %d events, err %v", len(got), err)
		}
		if want := "the event stream of run " + runID + " dropped 3 times in a row: unexpected EOF"; err.Error() != want {
			t.Errorf("err = %q, want %q", err, want)
		}
		if n := len(b.fake.StreamAfters(runID)); n != 3 {
			t.Errorf("%d connections, want 3 (reconnecting twice after the drop that followed progress)", n)
		}
	})

	t.Run("ErrorEvents", func(t *testing.T) {
		t.Parallel()
		// The real server reports a failure after the stream started as
		// an "error" event: the server shutting down is worth a
		// reconnection, anything else is final.
		var conns atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			switch conns.Add(1) {
			case 1:
				_, _ = fmt.Fprint(w, "id: 0\nevent: checkpoint\ndata: {\"type\":\"checkpoint\",\"run_id\":\"r\",\"at\":\"2030-01-02T03:04:05Z\"}\n\n")
				_, _ = fmt.Fprint(w, "event: error\ndata: {\"error\":{\"code\":\"unavailable\",\"message\":\"the orchestrator is shutting down\"}}\n\n")
			default:
				_, _ = fmt.Fprint(w, ": keepalive\n\nevent: error\ndata: {\"error\":{\"code\":\"internal\",\"message\":\"internal error\"}}\n\n")
			}
		}))
		defer srv.Close()
		hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
		defer hc.CloseIdleConnections()
		c := apiclient.New(srv.URL, "", hc)
		c.ReconnectDelay = 0
		n := 0
		err := c.Events(t.Context(), "r", -1, func(api.Event) error { n++; return nil })
		var apiErr *apiclient.Error
		if !errors.As(err, &apiErr) || apiErr.Code != "internal" || apiErr.Status != 0 || err.Error() != "internal error" {
			t.Fatalf("err = %#v", err)
		}
		if n != 1 || conns.Load() != 2 {
			t.Errorf("%d events over %d connections, want 1 over 2", n, conns.Load())
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		c, b := setup(t)
		_, err := collect(t, c, -1)
		var apiErr *apiclient.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
			t.Fatalf("err = %v", err)
		}
		if n := len(b.fake.Requests()); n != 1 {
			t.Errorf("%d requests, want 1 (no reconnection on a 404)", n)
		}
	})

	t.Run("CallbackError", func(t *testing.T) {
		t.Parallel()
		c, b := setup(t)
		b.fake.AddRun(waitingRun())
		b.fake.SetStream(runID, &apiclienttest.Stream{Events: script()})
		stop := errors.New("stop")
		n := 0
		err := c.Events(t.Context(), runID, -1, func(api.Event) error {
			n++
			if n == 2 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 2 {
			t.Fatalf("err = %v after %d events", err, n)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		c, b := setup(t)
		b.fake.AddRun(waitingRun())
		b.fake.SetStream(runID, &apiclienttest.Stream{Events: script()[:2], Hold: true})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		n := 0
		err := c.Events(ctx, runID, -1, func(api.Event) error {
			if n++; n == 2 {
				cancel() // as Ctrl-C would, while the stream is open
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
		if n := len(b.fake.StreamAfters(runID)); n != 1 {
			t.Errorf("%d connections, want 1", n)
		}
	})
}
