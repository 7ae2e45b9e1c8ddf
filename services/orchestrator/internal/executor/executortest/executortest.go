// Package executortest is the conformance suite of the orchestrator's
// executors: what every executor.Executor must do for the engine, run
// against the real service behind it (the mesh executor against mesh-exec,
// the marketplace executor against the marketplace), each with the fake
// claude CLI as its agent. Only tests import it.
package executortest

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshwork/meshwork/services/orchestrator/internal/executor"
	"github.com/meshwork/meshwork/services/orchestrator/internal/pipeline"
)

// HTTPClient returns an HTTP client on a transport of the test's own (a
// clone of http.DefaultTransport), whose idle connections are closed when
// the test ends, after the cleanups registered later (closing the executor
// that uses it): no connection of an executor outlives its test.
func HTTPClient(tb testing.TB) *http.Client {
	tb.Helper()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	tb.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport}
}

// Harness is an executor under test, connected to its real service.
type Harness struct {
	Executor executor.Executor
	// RoleName and Role are what a request on a thread names: the role's
	// via and its worker or repository (a repository of the thread's own,
	// for mesh, so that threads never share one).
	RoleName string
	Role     func(thread string) pipeline.Role
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	t.Helper()
	t.Run("answers, reporting its session while it runs", func(t *testing.T) {
		t.Parallel()
		thread := newThread()
		var seen sessions
		res, err := h.Executor.Execute(context.Background(), h.request(thread, "say hello", "", seen.record))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.Output, "say hello") || res.SessionID == "" {
			t.Errorf("result %+v: want the fake agent's answer to the task, and a session", res)
		}
		if ids := seen.get(); len(ids) == 0 || ids[len(ids)-1] != res.SessionID {
			t.Errorf("OnSession got %q, want it to name the result's session %s before the call returned", ids, res.SessionID)
		}
	})
	t.Run("resumes the session on its thread", func(t *testing.T) {
		t.Parallel()
		thread := newThread()
		first, err := h.Executor.Execute(context.Background(), h.request(thread, "first turn", "", nil))
		if err != nil {
			t.Fatal(err)
		}
		second, err := h.Executor.Execute(context.Background(), h.request(thread, "second turn", first.SessionID, nil))
		if err != nil {
			t.Fatal(err)
		}
		if second.SessionID != first.SessionID || !strings.Contains(second.Output, "second turn") {
			t.Errorf("the second turn: %+v, want session %s resumed", second, first.SessionID)
		}
	})
	t.Run("threads at once stay apart", func(t *testing.T) {
		t.Parallel()
		var wg sync.WaitGroup
		results := make([]executor.Result, 2)
		errs := make([]error, 2)
		for i := range results {
			wg.Go(func() {
				results[i], errs[i] = h.Executor.Execute(context.Background(), h.request(newThread(), "task of thread", "", nil))
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if results[0].SessionID == "" || results[0].SessionID == results[1].SessionID {
			t.Errorf("two threads got sessions %q and %q, want two", results[0].SessionID, results[1].SessionID)
		}
	})
	t.Run("a cancelled call ends at once", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		if _, err := h.Executor.Execute(ctx, h.request(newThread(), "never runs", "", nil)); err == nil {
			t.Error("a call whose context was cancelled succeeded")
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("a cancelled call took %v", took)
		}
	})
}

func (h Harness) request(thread, task, session string, onSession func(string)) executor.Request {
	return executor.Request{
		RunID: "run-" + thread, NodeID: "node", Iteration: 1, Attempt: 1, Thread: thread,
		RoleName: h.RoleName, Role: h.Role(thread), Task: task, SessionID: session, OnSession: onSession,
	}
}

// newThread is a thread of its own for one subtest.
func newThread() string { return "t" + strings.ToLower(rand.Text()[:12]) }

// sessions records what OnSession was given.
type sessions struct {
	mu  sync.Mutex
	ids []string
}

func (s *sessions) record(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids = append(s.ids, id)
}

func (s *sessions) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}
