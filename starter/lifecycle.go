package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/intake/ops"
	"github.com/paritysync/paritysync/models"
)

// A batch's lifecycle from the operator's side: starting an id once, cancelling,
// a truthful status read from the system of record, every outcome.

// rerunID names a re-run of a finished batch: a new batch, whose outcomes are its own.
func rerunID(batchID string, now time.Time) string {
	return batchID + ".rerun-" + now.UTC().Format("20060102-150405")
}

// batchWorkflowID accepts a batch id or its workflow id.
func batchWorkflowID(arg string) (string, string) {
	if id, ok := strings.CutPrefix(arg, models.BatchWorkflowID("")); ok {
		return id, arg
	}
	return arg, models.BatchWorkflowID(arg)
}

// outcomes reads batch batchID's recorded outcomes per channel, for follow.
func (d *deps) outcomes(batchID string) func(context.Context) ([]models.ChannelCounts, error) {
	return func(ctx context.Context) ([]models.ChannelCounts, error) {
		st, err := d.store(ctx)
		if err != nil {
			return nil, err
		}
		return st.BatchCounts(ctx, batchID)
	}
}

// liveCounts is st's per-channel totals with the outcomes recorded so far, or st's
// own counts (whole chunks) when the store cannot be read.
func liveCounts(ctx context.Context, outcomes func(context.Context) ([]models.ChannelCounts, error), st models.BatchStatus) []models.ChannelCounts {
	if outcomes == nil {
		return st.Channels
	}
	stored, err := outcomes(ctx)
	if err != nil {
		return st.Channels
	}
	out := make([]models.ChannelCounts, 0, len(st.Channels))
	for _, c := range st.Channels {
		live := models.ChannelCounts{Channel: c.Channel, Total: c.Total, Deferred: c.Deferred, Requests: c.Requests}
		for _, s := range stored {
			if s.Channel == c.Channel {
				live.Committed, live.Superseded, live.Rejected = s.Committed, s.Superseded, s.Rejected
				live.DeadLettered, live.Cancelled = s.DeadLettered, s.Cancelled
			}
		}
		out = append(out, live)
	}
	return out
}

// batchCancel cancels a batch and waits until it has closed its outcomes. For a
// batch that ended without closing them (terminated), it closes them itself.
func batchCancel(args []string, out io.Writer, getenv func(string) string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usageError{"batch cancel: want exactly one batch id"}
	}
	batchID, wfID := batchWorkflowID(args[0])
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	st, err := d.store(ctx)
	if err != nil {
		return err
	}
	if running, err := isRunning(ctx, tc, wfID); err == nil && running {
		fmt.Fprintf(out, "cancelling %s: running chunks finish their in-flight request, the rest is cancelled\n", wfID)
	}
	c, err := ops.CancelBatch(ctx, tc, st, batchID)
	if err != nil {
		return err
	}
	switch {
	case c.Was == ops.StateRunning:
	case c.Was == ops.StateTerminated || c.Was == ops.StateFailed || c.Was == ops.StateTimedOut:
		// Ended without closing its outcomes (terminated from the UI, say): what
		// still waited is cancelled now, and reconciliation re-sends those cells.
		fmt.Fprintf(out, "%s had ended without closing its outcomes: %d updates cancelled\n", wfID, c.Closed)
	default:
		fmt.Fprintf(out, "%s already ended\n", wfID)
	}
	return printStoredCounts(ctx, d, batchID, out)
}

// isRunning reports whether workflow wfID runs.
func isRunning(ctx context.Context, tc client.Client, wfID string) (bool, error) {
	desc, err := tc.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", wfID, err)
	}
	return desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// printStoredCounts prints a batch's outcomes as the store holds them.
func printStoredCounts(ctx context.Context, d *deps, batchID string, out io.Writer) error {
	st, err := d.store(ctx)
	if err != nil {
		return err
	}
	counts, err := st.BatchCounts(ctx, batchID)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "channel\twith outcome\tcommitted\tsuperseded\trejected\tdead-lettered\tcancelled\t")
	var t models.ChannelCounts
	for _, c := range append(counts, models.ChannelCounts{Channel: "all"}) {
		if c.Channel == "all" {
			c = t
			c.Channel = "all"
		}
		t.Add(c)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", c.Channel, c.Total, c.Committed, c.Superseded, c.Rejected,
			c.DeadLettered, c.Cancelled)
	}
	return tw.Flush()
}

// batchStatus reports a batch truthfully: its state from Temporal (running, done,
// cancelled, terminated …), its per-update progress from the system of record,
// and, while it runs and a worker answers, its chunks and pauses.
func batchStatus(args []string, out io.Writer, getenv func(string) string) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return usageError{"batch status: want exactly one batch id"}
	}
	batchID, wfID := batchWorkflowID(args[0])
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	st, err := d.store(ctx)
	if err != nil {
		return err
	}
	r, err := ops.BatchState(ctx, tc, st, batchID)
	if errors.Is(err, ops.ErrNoBatch) {
		return fmt.Errorf("no batch %s", batchID)
	}
	if err != nil {
		return err
	}
	state := r.State
	if state == ops.StateTerminated {
		state = "terminated (batch cancel closes its waiting updates; reconciliation re-sends their cells)"
	}
	fmt.Fprintf(out, "%s: %s\n", wfID, strings.ReplaceAll(state, "_", " "))
	if r.State == ops.StateRunning {
		if r.Live == nil {
			fmt.Fprintln(out, "no worker answered the status query (is a worker running on task queue "+
				d.settings.TaskQueue+"?); progress below is from the store")
		} else {
			fmt.Fprintf(out, "%d mutations, chunks %d finished / %d running / %d total\n",
				r.Live.Mutations, r.Live.Finished, r.Live.Running, r.Live.Chunks)
			if len(r.Live.Paused) > 0 {
				fmt.Fprintf(out, "paused: %s\n", strings.Join(r.Live.Paused, ", "))
			}
		}
	}
	if err := printStoredCounts(ctx, d, batchID, out); err != nil {
		return err
	}
	fmt.Fprintln(out, d.uiLink(wfID))
	return nil
}

// batchOutcomes lists a batch's outcomes: all rejections (batch rejections ID), or
// one mutation's fate (batch outcome ID --mutation M), as a table or JSON lines.
func batchOutcomes(rejections bool, args []string, out io.Writer, getenv func(string) string) error {
	name := map[bool]string{true: "batch rejections", false: "batch outcome"}[rejections]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	mutation := fs.String("mutation", "", "the mutation id (batch outcome)")
	asJSON := fs.Bool("json", false, "JSON lines instead of a table")
	var id string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		id, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if id == "" || fs.NArg() > 0 || (!rejections && *mutation == "") {
		return usageError{name + ": want a batch id" + map[bool]string{true: "", false: " and --mutation"}[rejections]}
	}
	batchID, _ := batchWorkflowID(id)
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	ctx := context.Background()
	st, err := d.store(ctx)
	if err != nil {
		return err
	}
	var list []store.MutationOutcome
	if rejections {
		err = st.BatchOutcomes(ctx, batchID, models.OutcomeRejected, func(o store.MutationOutcome) error {
			list = append(list, o)
			return nil
		})
	} else {
		list, err = st.Outcomes(ctx, batchID, *mutation)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		for _, o := range list {
			if err := enc.Encode(o); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mutation\tchannel\tfamily\toutcome\treason")
	for _, o := range list {
		fam := string(o.Family)
		if fam == "" {
			fam = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.MutationID, o.Channel, fam, o.Outcome, o.Reason)
	}
	_ = tw.Flush()
	if !rejections && len(list) == 0 {
		fmt.Fprintf(out, "no outcome yet for %s in %s (still on its way, or not in the batch)\n", *mutation, batchID)
		return nil
	}
	fmt.Fprintf(out, "%d %s\n", len(list), map[bool]string{true: "rejections", false: "outcomes"}[rejections])
	return nil
}
