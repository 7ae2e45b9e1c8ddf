package meshctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/pkg/cligroup"
	"github.com/meshwork/meshwork/services/orchestrator/api"
	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
)

func (a *app) runsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List, inspect, fork, approve, resume, cancel and prune runs",
	}
	cligroup.Group(cmd)
	cmd.AddCommand(a.runsList(), a.runsShow(), a.runsHistory(), a.runsFork(), a.runsApprove(),
		a.runsCancel(), a.runsResume(), a.runsPrune(), a.runsWatch(), a.runsPatch(), a.runsExport())
	return cmd
}

func (a *app) runsPatch() *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "patch RUN_ID",
		Short: "Print a run's patch (a git-format diff that git apply takes): its pipeline's patch node's, or --node's",
		Args:  exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			v, err := c.GetRun(ctx, args[0])
			if err != nil {
				return err
			}
			n, err := patchNode(v, node)
			if err != nil {
				return err
			}
			if len(n.PatchOmits) > 0 {
				// Said first, and whatever the patch: applying it alone
				// loses these files.
				if _, err := fmt.Fprintf(cmd.ErrOrStderr(), "run %s: the patch of %s leaves out %d changed file(s) too large for a patch (over 4 MiB); applying it does not make them (meshctl runs export %s --node %s -o FILE saves them):\n", v.ID, n.ID, len(n.PatchOmits), v.ID, n.ID); err != nil {
					return err
				}
				for _, p := range n.PatchOmits {
					if strings.IndexFunc(p, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
						p = strconv.Quote(p) // one line a path, as it is
					}
					if _, err := fmt.Fprintf(cmd.ErrOrStderr(), "  %s\n", p); err != nil {
						return err
					}
				}
			}
			if n.Patch == "" {
				if len(n.PatchOmits) > 0 {
					return nil
				}
				// Nothing to apply: git apply would only say "No valid
				// patches in input".
				_, err = fmt.Fprintf(cmd.ErrOrStderr(), "run %s: %s changed nothing; its patch is empty\n", v.ID, n.ID)
				return err
			}
			out := a.rawOut
			if out == nil {
				out = cmd.OutOrStdout()
			}
			_, err = io.WriteString(out, n.Patch)
			return err
		}),
	}
	cmd.Flags().StringVar(&node, "node", "", "the node whose patch to print (default: the pipeline's patch node)")
	return cmd
}

// patchNode is the run's node whose patch to print: node, or the run's
// patch node; an error says why there is none.
func patchNode(v api.RunView, node string) (api.NodeView, error) {
	if node == "" {
		if v.PatchNode == "" {
			return api.NodeView{}, fmt.Errorf("run %s: pipeline %s makes no patch (no node has a source)", v.ID, v.Pipeline)
		}
		node = v.PatchNode
	}
	for _, n := range v.Nodes {
		if n.ID != node {
			continue
		}
		if n.Status != "succeeded" && n.Patch == "" && len(n.PatchOmits) == 0 {
			return api.NodeView{}, fmt.Errorf("run %s: node %s has no patch yet (it is %s)", v.ID, node, n.Status)
		}
		return n, nil
	}
	return api.NodeView{}, fmt.Errorf("run %s: no node %q", v.ID, node)
}

func (a *app) runsList() *cobra.Command {
	var f apiclient.RunFilter
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Args:  exactArgs(),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, _ []string) error {
			if f.Limit < 0 || f.Limit > api.MaxListLimit {
				return fmt.Errorf("--limit %d: want 1 to %d (0 or none: %d)", f.Limit, api.MaxListLimit, api.DefaultListLimit)
			}
			runs, err := c.ListRuns(ctx, f)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.json() {
				return printJSON(out, map[string]any{"runs": nonNil(runs)})
			}
			tw := newTable(out)
			tw.println("ID\tPIPELINE\tSTATUS\tHEAD\tCREATED")
			for _, r := range runs {
				tw.printf("%s\t%s\t%s\t%d\t%s\n", r.ID, r.Pipeline, r.Status, r.HeadSeq, a.time(r.CreatedAt))
			}
			if err := tw.done(); err != nil {
				return err
			}
			if limit := orDefault(f.Limit, api.DefaultListLimit); len(runs) == limit {
				note(cmd.ErrOrStderr(), "More runs may follow: add --before %s\n", runs[len(runs)-1].ID)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Pipeline, "pipeline", "", "only runs of this pipeline")
	fl.StringVar(&f.Status, "status", "", "only runs with this status: running, waiting, succeeded, failed or cancelled")
	fl.StringVar(&f.Thread, "thread", "", "only runs on this thread")
	fl.IntVar(&f.Limit, "limit", 0, "at most this many runs (default 50, at most 1000)")
	fl.StringVar(&f.Before, "before", "", "only runs created before this run id (the next page)")
	return cmd
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (a *app) runsShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show RUN_ID",
		Short: "Show a run: its status, inputs, nodes, sessions, pending approvals and outputs",
		Args:  exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			v, err := c.GetRun(ctx, args[0])
			if err != nil {
				return err
			}
			if a.json() {
				return printJSON(cmd.OutOrStdout(), v)
			}
			return a.printRun(cmd.OutOrStdout(), v)
		}),
	}
}

func (a *app) printRun(out io.Writer, v api.RunView) error {
	tw := newTable(out)
	tw.printf("Run:\t%s\n", v.ID)
	tw.printf("Pipeline:\t%s (%s)\n", v.Pipeline, short(v.PipelineHash))
	tw.printf("Status:\t%s\n", v.Status)
	if v.Error != "" {
		tw.printf("Error:\t%s\n", v.Error)
	}
	tw.printf("Thread:\t%s\n", v.Thread)
	if v.TraceID != "" {
		tw.printf("Trace:\t%s\n", v.TraceID)
	}
	if v.ForkedFromRun != "" && v.ForkedFromSeq != nil {
		tw.printf("Forked from:\trun %s at checkpoint %d\n", v.ForkedFromRun, *v.ForkedFromSeq)
	}
	tw.printf("Head:\tcheckpoint %d\n", v.HeadSeq)
	tw.printf("Created:\t%s\n", a.time(v.CreatedAt))
	if v.FinishedAt != nil {
		tw.printf("Finished:\t%s\n", a.time(*v.FinishedAt))
	}
	if err := tw.done(); err != nil {
		return err
	}

	p := newText(out)
	if len(v.Inputs) > 0 {
		p.println("\nInputs:")
		for _, k := range slices.Sorted(maps.Keys(v.Inputs)) {
			p.printf("  %s: %s\n", k, jsonText(v.Inputs[k]))
		}
	}

	if len(v.Nodes) > 0 {
		p.println("\nNodes:")
		tw = newTable(out)
		tw.println("  NODE\tTYPE\tSTATUS\tITERATION\tATTEMPTS")
		for _, n := range v.Nodes {
			tw.printf("  %s\t%s\t%s\t%d\t%d\n", n.ID, n.Type, n.Status, n.Iteration, n.Attempts)
		}
		if err := tw.done(); err != nil {
			return err
		}
	}

	var failed []api.Attempt
	for _, at := range v.Attempts {
		if at.Status == "failed" {
			failed = append(failed, at)
		}
	}
	if len(failed) > 0 {
		p.println("\nFailed attempts:")
		for _, at := range failed {
			p.printf("  %s iteration %d attempt %d: %s\n", at.NodeID, at.Iteration, at.Attempt, oneLine(at.Error, maxErrorText))
		}
	}

	if len(v.Sessions) > 0 {
		p.println("\nSessions:")
		tw = newTable(out)
		for _, role := range slices.Sorted(maps.Keys(v.Sessions)) {
			tw.printf("  %s\t%s\n", role, v.Sessions[role])
		}
		if err := tw.done(); err != nil {
			return err
		}
	}

	if pending := pendingInterrupts(v); len(pending) > 0 {
		p.println("\nWaiting for approval:")
		tw = newTable(out)
		for _, in := range pending {
			tw.printf("  %s\t%s\n", in.NodeID, approveCommand(in.ID))
		}
		if err := tw.done(); err != nil {
			return err
		}
	}

	if len(v.Outputs) > 0 {
		p.println()
		printOutputs(p, v)
	}
	return p.err
}

func pendingInterrupts(v api.RunView) []api.Interrupt {
	var out []api.Interrupt
	for _, in := range v.Interrupts {
		if in.Status == "pending" {
			out = append(out, in)
		}
	}
	return out
}

func (a *app) runsHistory() *cobra.Command {
	return &cobra.Command{
		Use:   "history RUN_ID",
		Short: "List a run's checkpoints, to fork from one of them",
		Args:  exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			cps, err := c.Checkpoints(ctx, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if a.json() {
				return printJSON(out, map[string]any{"checkpoints": nonNil(cps)})
			}
			tw := newTable(out)
			tw.println("SEQ\tNODE\tITERATION\tCHANGES\tBYTES\tCREATED")
			for _, cp := range cps {
				node, iteration := cp.NodeID, fmt.Sprint(cp.Iteration)
				if node == "" {
					node, iteration = "-", "-"
				}
				tw.printf("%d\t%s\t%s\t%s\t%d\t%s\n", cp.Seq, node, iteration, changes(cp), cp.Bytes, a.time(cp.CreatedAt))
			}
			return tw.done()
		}),
	}
}

// changes describes a checkpoint's delta: "research: succeeded, write:
// pending".
func changes(cp api.Checkpoint) string {
	var parts []string
	if cp.ParentRun != "" && cp.ParentRun != cp.RunID && cp.ParentSeq != nil {
		parts = append(parts, fmt.Sprintf("fork of %s@%d", cp.ParentRun, *cp.ParentSeq))
	}
	if cp.Delta.Inputs != nil {
		parts = append(parts, "inputs")
	}
	for _, id := range slices.Sorted(maps.Keys(cp.Delta.Nodes)) {
		parts = append(parts, id+": "+cp.Delta.Nodes[id].Status)
	}
	for _, role := range slices.Sorted(maps.Keys(cp.Delta.Sessions)) {
		parts = append(parts, "session "+role)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func (a *app) runsFork() *cobra.Command {
	var (
		req       apiclient.ForkRequest
		patchFile string
		watch     bool
	)
	cmd := &cobra.Command{
		Use:   "fork RUN_ID --seq N",
		Short: "Start a new run from a checkpoint of a run",
		Long: `Start a new run from checkpoint N of a run (see meshctl runs history) and
print its id. Nothing is copied: the fork's state is the checkpoint's, plus
the patch of --patch-file, a JSON state delta such as

  {"inputs": {"task": "a new task"}, "nodes": {"write": {"status": "pending"}}}

(a node set to pending runs again). --watch follows the fork as meshctl run
--watch does, with the same exit codes.`,
		Args: exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			if patchFile != "" {
				var patch api.State
				if err := readJSONFile(patchFile, cmd.InOrStdin(), &patch); err != nil {
					return fmt.Errorf("--patch-file: %w", err)
				}
				req.Patch = &patch
			}
			run, err := c.Fork(ctx, args[0], req)
			if err != nil {
				return err
			}
			return a.started(ctx, cmd, c, run, watch, fmt.Sprintf("Run %s forked from run %s at checkpoint %d.", run.ID, args[0], req.Seq))
		}),
	}
	f := cmd.Flags()
	f.IntVar(&req.Seq, "seq", 0, "the checkpoint to fork from (required)")
	f.StringVar(&patchFile, "patch-file", "", "a JSON state patch to apply before the fork runs (- for stdin)")
	f.StringVar(&req.Thread, "thread", "", "the fork's thread (default: a new thread that starts with the checkpoint's role sessions)")
	f.BoolVar(&req.Migrate, "migrate", false, "run under the pipeline's current definition if it changed since the run started")
	f.BoolVarP(&watch, "watch", "w", false, "follow the fork until it ends or waits for an approval")
	_ = cmd.MarkFlagRequired("seq")
	return cmd
}

func (a *app) runsApprove() *cobra.Command {
	var (
		value, valueJSON string
		migrate, watch   bool
	)
	cmd := &cobra.Command{
		Use:   "approve INTERRUPT_ID|RUN_ID",
		Short: "Resume an approval that waits, with a decision",
		Long: `Resume an interrupt (an approval node waiting) with a value, which becomes
the node's output: --value is a string, --value-json any JSON.

Given a run id, approve resumes the run's only pending interrupt; when the
run has several, it lists them so that you pick one by its id.`,
		Example: `  meshctl runs approve 5f0c…e1 --value approved
  meshctl runs approve 5f0c…e1 --value-json '{"decision": "rejected", "reason": "too long"}'`,
		Args: exactArgs("INTERRUPT_ID|RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			var raw json.RawMessage
			switch {
			case cmd.Flags().Changed("value-json"):
				if !json.Valid([]byte(valueJSON)) {
					return fmt.Errorf("--value-json %s is not JSON", valueJSON)
				}
				raw = json.RawMessage(valueJSON)
			case cmd.Flags().Changed("value"):
				raw, _ = json.Marshal(value)
			default:
				return errors.New("give the decision with --value (such as --value approved) or --value-json")
			}
			interruptID, err := findInterrupt(ctx, c, args[0])
			if err != nil {
				return err
			}
			run, err := c.ResumeInterrupt(ctx, interruptID, raw, migrate)
			if err != nil {
				return err
			}
			return a.afterAction(ctx, cmd, c, run, watch, fmt.Sprintf("Interrupt %s resumed with %s: run %s is %s.", interruptID, valueText(raw), run.ID, run.Status))
		}),
	}
	f := cmd.Flags()
	f.StringVar(&value, "value", "", "the decision, as a string (such as approved)")
	f.StringVar(&valueJSON, "value-json", "", "the decision, as JSON")
	f.BoolVar(&migrate, "migrate", false, "continue under the pipeline's current definition if it changed since the run started")
	f.BoolVarP(&watch, "watch", "w", false, "follow the run after the approval until it ends or waits again")
	cmd.MarkFlagsMutuallyExclusive("value", "value-json")
	return cmd
}

// findInterrupt returns the interrupt id an argument names: the argument
// itself, or the only pending interrupt of the run it names.
func findInterrupt(ctx context.Context, c *apiclient.Client, id string) (string, error) {
	v, err := c.GetRun(ctx, id)
	var apiErr *apiclient.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return id, nil // not a run: an interrupt, or the resume says it is neither
	}
	if err != nil {
		return "", err
	}
	pending := pendingInterrupts(v)
	switch len(pending) {
	case 0:
		return "", fmt.Errorf("run %s has no pending interrupt (it is %s)", v.ID, v.Status)
	case 1:
		return pending[0].ID, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "run %s has %d pending interrupts; approve one by its id:", v.ID, len(pending))
	for _, in := range pending {
		fmt.Fprintf(&b, "\n  %s   (node %s, iteration %d)", approveCommand(in.ID), in.NodeID, in.Iteration)
	}
	return "", errors.New(b.String())
}

// afterAction prints the run an action returned (or msg), or watches it
// from its head on.
func (a *app) afterAction(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, run api.Run, watch bool, msg string) error {
	out := cmd.OutOrStdout()
	switch {
	case watch:
		if !a.json() {
			if _, err := fmt.Fprintln(out, msg); err != nil {
				return err
			}
		}
		// From the checkpoint the action wrote, which shows what it did.
		return a.watch(ctx, cmd, c, run.ID, max(run.HeadSeq-1, 0))
	case a.json():
		return printJSON(out, run)
	default:
		_, err := fmt.Fprintln(out, msg)
		return err
	}
}

func (a *app) runsCancel() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Cancel a run: no further node starts, running ones are stopped",
		Args:  exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			run, err := c.Cancel(ctx, args[0])
			if err != nil {
				return err
			}
			return a.afterAction(ctx, cmd, c, run, false, fmt.Sprintf("Run %s cancelled.", run.ID))
		}),
	}
}

func (a *app) runsResume() *cobra.Command {
	var migrate, watch bool
	cmd := &cobra.Command{
		Use:   "resume RUN_ID",
		Short: "Resume a failed run: its failed nodes run again",
		Long: `Resume a failed run: its failed nodes run again, as their next iteration.
An approval that waits is resumed with meshctl runs approve instead.`,
		Args: exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			run, err := c.ResumeRun(ctx, args[0], migrate)
			if err != nil {
				return err
			}
			return a.afterAction(ctx, cmd, c, run, watch, fmt.Sprintf("Run %s resumed: it is %s.", run.ID, run.Status))
		}),
	}
	cmd.Flags().BoolVar(&migrate, "migrate", false, "continue under the pipeline's current definition if it changed since the run started")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the run until it ends or waits for an approval")
	return cmd
}

func (a *app) runsPrune() *cobra.Command {
	var keep int
	cmd := &cobra.Command{
		Use:   "prune RUN_ID --keep N",
		Short: "Delete a run's checkpoints but the last N",
		Long: `Delete a run's checkpoints but the last N. The oldest one kept becomes a full
snapshot, and forks of deleted checkpoints keep their state, so no state is
lost but the history before it: runs history and fork no longer reach it.`,
		Args: exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			deleted, err := c.Prune(ctx, args[0], keep)
			if err != nil {
				return err
			}
			if a.json() {
				return printJSON(cmd.OutOrStdout(), map[string]int64{"deleted": deleted})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "Deleted %s of run %s.\n", plural(int(deleted), "checkpoint"), args[0])
			return err
		}),
	}
	cmd.Flags().IntVar(&keep, "keep", 0, "how many of the last checkpoints to keep (required, at least 1)")
	_ = cmd.MarkFlagRequired("keep")
	return cmd
}

func (a *app) runsWatch() *cobra.Command {
	return &cobra.Command{
		Use:   "watch RUN_ID",
		Short: "Follow a run from its start until it ends or waits for an approval",
		Long: `Follow a run, from its start, until it ends or waits for an approval. It exits
0 when the run succeeded, 2 when it waits for an approval, 1 when it failed
or was cancelled. Ctrl-C stops watching, not the run.`,
		Args: exactArgs("RUN_ID"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			return a.watch(ctx, cmd, c, args[0], -1)
		}),
	}
}
