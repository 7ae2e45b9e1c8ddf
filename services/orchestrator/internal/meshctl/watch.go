package meshctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
)

// maxErrorText bounds an error quoted on a progress line.
const maxErrorText = 200

// watch follows a run's events after checkpoint after (-1 for all) until
// the run ends or waits, printing them, and returns the exit status of the
// run's final status.
func (a *app) watch(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, runID string, after int) error {
	out := cmd.OutOrStdout()
	var view api.RunView
	if !a.json() || after >= 0 {
		var err error
		if view, err = c.GetRun(ctx, runID); err != nil {
			return stoppedWatching(ctx, runID, err)
		}
	}
	// From a checkpoint on, the attempts the run had are old news; the
	// server sends every attempt of the run again.
	old := map[int64]bool{}
	if after >= 0 {
		for _, at := range view.Attempts {
			old[at.ID] = true
		}
	}
	var last api.Event
	if a.json() {
		err := c.Events(ctx, runID, after, func(ev api.Event) error {
			if ev.Attempt != nil && old[ev.Attempt.ID] {
				return nil
			}
			last = ev
			return printJSONLine(out, ev)
		})
		if err != nil {
			return stoppedWatching(ctx, runID, err)
		}
		return exitStatus(last.Status)
	}

	w := newWatcher(c, newText(out), view, old)
	note(cmd.ErrOrStderr(), "Watching run %s; Ctrl-C stops watching, not the run.\n", runID)
	err := c.Events(ctx, runID, after, func(ev api.Event) error {
		last = ev
		return w.event(ctx, ev)
	})
	if err != nil {
		return stoppedWatching(ctx, runID, err)
	}
	if v, err := c.GetRun(ctx, runID); err == nil {
		view = v
	} else {
		view.Error, view.Interrupts = last.Error, nil
	}
	view.Status = last.Status // as the stream saw it end
	p := newText(out)
	printSummary(p, view)
	if p.err != nil {
		return p.err
	}
	return exitStatus(last.Status)
}

// stoppedWatching turns Ctrl-C into exit status 130, with what to do next.
func stoppedWatching(ctx context.Context, runID string, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return &ExitError{Code: 130, Err: fmt.Errorf("stopped watching; run %s goes on (meshctl runs watch %s follows it again, meshctl runs cancel %s stops it)", runID, runID, runID)}
	}
	return err
}

// exitStatus is meshctl's exit status for a run's final status: 0 when it
// succeeded, 2 when it waits for an approval, 1 otherwise.
func exitStatus(status string) error {
	switch status {
	case api.RunSucceeded:
		return nil
	case api.RunWaiting:
		return &ExitError{Code: 2}
	default:
		return &ExitError{Code: 1}
	}
}

// printSummary prints how a watched run ended, and its outputs.
func printSummary(w *textWriter, v api.RunView) {
	switch v.Status {
	case api.RunSucceeded:
		w.printf("Run %s succeeded.\n", v.ID)
	case api.RunWaiting:
		w.printf("Run %s is waiting for approval:\n", v.ID)
		for _, in := range v.Interrupts {
			if in.Status == "pending" {
				w.printf("  %s: %s\n", in.NodeID, approveCommand(in.ID))
			}
		}
	case api.RunFailed:
		w.printf("Run %s failed: %s\n", v.ID, v.Error)
		w.printf("Once the cause is fixed, resume it: meshctl runs resume %s\n", v.ID)
	case api.RunCancelled:
		w.printf("Run %s was cancelled.\n", v.ID)
	default:
		w.printf("Run %s is %s.\n", v.ID, v.Status)
	}
	printOutputs(w, v)
}

// watcher prints a run's events as progress lines.
type watcher struct {
	c     *apiclient.Client
	out   *textWriter
	runID string
	order map[string]int    // node id → place in the pipeline
	types map[string]string // node id → agent or approval
	width int               // of the longest node id
	// failed holds each node's last failed attempt, whose error the
	// node's failure line quotes.
	failed map[string]api.Attempt
	// old holds the attempts not to show: those the run had before a
	// watch that began at a checkpoint.
	old map[int64]bool
}

func newWatcher(c *apiclient.Client, out *textWriter, v api.RunView, old map[int64]bool) *watcher {
	w := &watcher{c: c, out: out, runID: v.ID, order: map[string]int{}, types: map[string]string{}, failed: map[string]api.Attempt{}, old: old}
	for i, n := range v.Nodes {
		w.order[n.ID], w.types[n.ID] = i, n.Type
		w.width = max(w.width, len(n.ID))
	}
	return w
}

func (w *watcher) line(symbol, node, text string) {
	w.out.printf("  %s %-*s %s\n", symbol, w.width, node, text)
}

func (w *watcher) event(ctx context.Context, ev api.Event) error {
	switch ev.Type {
	case "attempt":
		if ev.Attempt != nil && !w.old[ev.Attempt.ID] {
			w.attempt(ctx, *ev.Attempt)
		}
	case "checkpoint":
		w.checkpoint(ctx, ev)
	case "agent":
		if ev.Agent != nil {
			w.agent(*ev.Agent)
		}
	}
	return w.out.err // a closed stdout stops the watch
}

// agent prints what a running node's agent does: each tool call as the
// gate decided it ("Editing main.go", or refused with the constraints it
// broke), failed calls and notifications. The rest (a call that ran, the
// end of a turn) shows in the node's own lines.
func (w *watcher) agent(ev api.AgentEvent) {
	switch ev.Kind {
	case "pre_tool":
		if d := ev.Decision; d != nil && !d.Allowed {
			reasons := make([]string, len(d.Violations))
			for i, v := range d.Violations {
				reasons[i] = v.ConstraintID + ": " + v.Message
			}
			w.line("⊘", ev.NodeID, oneLine("refused: "+ev.Text+" ("+strings.Join(reasons, "; ")+")", maxErrorText))
			return
		}
		w.line("·", ev.NodeID, oneLine(ev.Text, maxErrorText))
	case "tool_error":
		w.line("·", ev.NodeID, oneLine("failed: "+ev.Text, maxErrorText))
	case "notification", "permission_request":
		w.line("·", ev.NodeID, oneLine(ev.Text, maxErrorText))
	}
}

// attempt prints a failed attempt that is retried. The last attempt of a
// node that failed for good is left to the node's failure line.
func (w *watcher) attempt(ctx context.Context, a api.Attempt) {
	if a.Status != "failed" {
		return // a success shows with its checkpoint
	}
	w.failed[a.NodeID] = a
	text := fmt.Sprintf("attempt %d failed: %s", a.Attempt, oneLine(a.Error, maxErrorText))
	switch w.retried(ctx, a) {
	case retryFinal:
		return
	case retryYes:
		text += ", retrying"
	}
	w.line("✗", a.NodeID, text)
}

type retry int

const (
	retryUnknown retry = iota
	retryYes           // the attempt is or was retried
	retryFinal         // the attempt was the node's last
)

// retried finds out from the run whether a failed attempt is retried: the
// event does not say, the pipeline's retry policy does, and the run shows
// its effect.
func (w *watcher) retried(ctx context.Context, a api.Attempt) retry {
	v, err := w.c.GetRun(ctx, w.runID)
	if err != nil {
		return retryUnknown
	}
	for _, b := range v.Attempts {
		if b.NodeID == a.NodeID && b.Iteration == a.Iteration && b.Attempt > a.Attempt {
			return retryYes
		}
	}
	for _, n := range v.Nodes {
		if n.ID != a.NodeID {
			continue
		}
		switch {
		case n.Status == api.StatusFailed && n.Iteration == a.Iteration:
			return retryFinal
		case (v.Status == api.RunRunning || v.Status == api.RunWaiting) &&
			(n.Status == api.StatusPending || n.Status == api.StatusRunning):
			return retryYes
		}
	}
	return retryUnknown
}

// checkpoint prints the nodes a checkpoint changed, in the pipeline's order.
func (w *watcher) checkpoint(ctx context.Context, ev api.Event) {
	ids := slices.SortedFunc(maps.Keys(ev.Nodes), func(x, y string) int {
		ox, okx := w.order[x]
		oy, oky := w.order[y]
		if okx && oky {
			return cmp.Compare(ox, oy)
		}
		if okx != oky { // known nodes first
			if okx {
				return -1
			}
			return 1
		}
		return cmp.Compare(x, y)
	})
	for _, id := range ids {
		ns := ev.Nodes[id]
		switch ns.Status {
		case api.StatusSucceeded:
			if w.types[id] == "approval" {
				w.line("✓", id, fmt.Sprintf("resumed with %q", oneLine(ns.Output, maxErrorText)))
			} else {
				w.line("✓", id, fmt.Sprintf("succeeded (iteration %d, %s)", ns.Iteration, plural(ns.Attempts, "attempt")))
			}
		case api.StatusFailed:
			text := "failed"
			if ns.Attempts > 0 {
				text += " after " + plural(ns.Attempts, "attempt")
			}
			if a, ok := w.failed[id]; ok && a.Iteration == ns.Iteration {
				text += ": " + oneLine(a.Error, maxErrorText)
			}
			w.line("✗", id, text)
		case api.StatusSkipped:
			w.line("–", id, "skipped")
		case api.StatusWaiting:
			if in := w.interrupt(ctx, id); in != "" {
				w.line("⏸", id, "waiting for approval: "+approveCommand(in))
			} else {
				w.line("⏸", id, "waiting for approval")
			}
		case api.StatusPending:
			if ns.Iteration > 0 {
				w.line("↺", id, fmt.Sprintf("runs again (iteration %d)", ns.Iteration+1))
			} else {
				w.line("·", id, "pending")
			}
		default:
			w.line("·", id, ns.Status)
		}
	}
}

// interrupt returns the id of a node's pending interrupt, if any.
func (w *watcher) interrupt(ctx context.Context, nodeID string) string {
	v, err := w.c.GetRun(ctx, w.runID)
	if err != nil {
		return ""
	}
	id := ""
	for _, in := range v.Interrupts {
		if in.NodeID == nodeID && in.Status == "pending" {
			id = in.ID
		}
	}
	return id
}
