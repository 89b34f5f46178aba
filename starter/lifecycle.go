package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

// A batch's lifecycle from the operator's side: starting an id once, cancelling,
// a truthful status read from the system of record, every outcome.

// rerunID names a re-run of a finished batch: a new batch, whose outcomes are its own.
func rerunID(batchID string, now time.Time) string {
	return batchID + ".rerun-" + now.UTC().Format(ops.BatchIDTime)
}

// batchWorkflowID accepts a batch id or its workflow id.
func batchWorkflowID(arg string) (string, string) {
	if id, ok := strings.CutPrefix(arg, models.BatchWorkflowID("")); ok {
		return id, arg
	}
	return arg, models.BatchWorkflowID(arg)
}

// batchError is err of command cmd on batchID, a batch Temporal does not know
// made a notFoundError (exit 66).
func batchError(cmd, batchID string, err error) error {
	if errors.Is(err, ops.ErrNoBatch) {
		return notFoundError(fmt.Sprintf("%s: no batch %s", cmd, batchID))
	}
	return err
}

// lifecycleCmds are the batch lifecycle commands beside start, status and submit.
func (c *cli) lifecycleCmds() []*cobra.Command {
	cancel := &cobra.Command{
		Use:   "cancel BATCH_ID",
		Short: "Cancel a batch: every update ends committed or cancelled",
		Long: `Cancel a running batch. In-flight pushes finish and record their outcomes; every
update still waiting gets the outcome cancelled, and the batch ends cancelled. A
batch that ended without closing its outcomes (terminated from the UI) has them
closed as cancelled; reconciliation re-sends those cells.`,
		Args: exactArgs(1, "exactly one batch id"),
		RunE: func(cmd *cobra.Command, args []string) error { return c.batchCancel(cmd.Context(), args[0]) },
	}
	rejections := &cobra.Command{
		Use:   "rejections BATCH_ID",
		Short: "Every rejected mutation of a batch with its reasons",
		Long: `List every rejected mutation of a batch with each field and rule it broke, as
the system of record holds them (--output json: an array of outcomes).`,
		Args: exactArgs(1, "exactly one batch id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.batchOutcomes(cmd.Context(), args[0], "")
		},
	}
	var mutation string
	outcome := &cobra.Command{
		Use:   "outcome BATCH_ID --mutation M",
		Short: "One mutation's fate in a batch",
		Long: `Print the outcome of mutation M in a batch, per endpoint family: committed,
superseded, rejected, dead-lettered or cancelled, with the reason. A mutation with
no recorded outcome (not in the batch, or still on its way) exits 66.`,
		Args: exactArgs(1, "exactly one batch id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(mutation) == "" {
				return usageError("batch outcome: --mutation must name a mutation id")
			}
			return c.batchOutcomes(cmd.Context(), args[0], mutation)
		},
	}
	outcome.Flags().StringVarP(&mutation, "mutation", "m", "", "the mutation id (required)")
	required(outcome, "mutation")
	for _, cmd := range []*cobra.Command{cancel, rejections, outcome} {
		cmd.ValidArgsFunction = c.batchArgs
	}
	return []*cobra.Command{cancel, rejections, outcome}
}

// cancelled is what batch cancel prints.
type cancelled struct {
	BatchID    string                 `json:"batch_id"`
	WorkflowID string                 `json:"workflow_id"`
	Was        string                 `json:"was"`
	Closed     int                    `json:"closed_as_cancelled"`
	Channels   []models.ChannelCounts `json:"channels"`
}

// batchCancel cancels a batch and waits until it has closed its outcomes. For a
// batch that ended without closing them (terminated), it closes them itself.
func (c *cli) batchCancel(ctx context.Context, arg string) error {
	batchID, wfID := batchWorkflowID(arg)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	d, err := c.open(ctx, useTemporal|useStore)
	if err != nil {
		return err
	}
	defer d.close()
	r, err := ops.RequestCancel(ctx, d.tc, d.st, batchID)
	if err != nil {
		return batchError("batch cancel", batchID, err)
	}
	if r.Was == ops.StateRunning {
		c.diag("cancelling %s: running chunks finish their in-flight request, the rest is cancelled", wfID)
		if err := ops.AwaitCancelled(ctx, d.tc, batchID); err != nil {
			return err
		}
	}
	counts, err := d.st.BatchCounts(ctx, batchID)
	if err != nil {
		return err
	}
	if c.json() {
		return c.writeJSON(cancelled{BatchID: batchID, WorkflowID: wfID, Was: r.Was, Closed: r.Closed, Channels: counts})
	}
	switch r.Was {
	case ops.StateRunning:
	case ops.StateTerminated, ops.StateFailed, ops.StateTimedOut:
		// Ended without closing its outcomes (terminated from the UI, say): what
		// still waited is cancelled now, and reconciliation re-sends those cells.
		fmt.Fprintf(c.stdout, "%s had ended without closing its outcomes: %d updates cancelled\n", wfID, r.Closed)
	default:
		fmt.Fprintf(c.stdout, "%s already ended\n", wfID)
	}
	return c.outcomeTable(counts)
}

// outcomeTable prints a batch's outcomes per channel, as the store holds them.
func (c *cli) outcomeTable(counts []models.ChannelCounts) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "channel\twith outcome\tcommitted\tsuperseded\trejected\tdead-lettered\tcancelled\t")
	t := models.ChannelCounts{Channel: "all"}
	for _, ch := range append(counts, t) {
		if ch.Channel == "all" {
			ch = t
		}
		t.Add(ch)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", ch.Channel, ch.Total, ch.Committed, ch.Superseded, ch.Rejected,
			ch.DeadLettered, ch.Cancelled)
	}
	return tw.Flush()
}

// statusReport is what batch status prints, the same in both forms: the state as
// Temporal describes it, and per channel the updates and outcomes the system of
// record holds, with the rate since the batch started and the time left at it.
type statusReport struct {
	BatchID    string `json:"batch_id"`
	WorkflowID string `json:"workflow_id"`
	// State is running, done, cancelled, terminated, failed or timed_out; Done is
	// true for every state but running (the counts are final).
	State string `json:"state"`
	Done  bool   `json:"done"`
	// Planned says whether PrepareBatch recorded the batch's totals: before, each
	// channel's total is only its outcomes recorded.
	Planned bool `json:"planned"`
	// Mutations is the batch's, from its result once done.
	Mutations int `json:"mutations,omitempty"`
	// Channels count by the one rule of ops.ResultCounts.
	Channels []models.ChannelCounts `json:"channels"`
	Totals   models.ChannelCounts   `json:"totals"`
	// Progress is done of total per channel, at the average rate since the start.
	Progress []ops.ChannelProgress `json:"progress"`
	UI       string                `json:"ui"`
}

// batchStatus reports a batch truthfully: its state from Temporal's description
// (running, done, cancelled, terminated …) and its per-update progress from the
// system of record; it sends the workflow no query. Table and JSON print the same
// report and exit with the same status.
func (c *cli) batchStatus(ctx context.Context, arg string) error {
	batchID, wfID := batchWorkflowID(arg)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	d, err := c.open(ctx, useTemporal|useStore)
	if err != nil {
		return err
	}
	defer d.close()
	r, err := ops.BatchState(ctx, d.tc, d.st, batchID)
	if err != nil {
		return batchError("batch status", batchID, err)
	}
	p := r.ProgressAt(ops.ResultCounts(r.Counts, r.Final), time.Now())
	rep := statusReport{BatchID: batchID, WorkflowID: wfID, State: r.State, Done: r.State != ops.StateRunning,
		Planned: r.Planned, Channels: p.Channels, Totals: p.Totals, Progress: p.Progress, UI: d.uiLink(wfID)}
	if r.Final != nil {
		rep.Mutations = r.Final.Mutations
	}
	if c.json() {
		if err := c.writeJSON(rep); err != nil {
			return err
		}
	} else {
		c.statusTable(rep, d.settings.TaskQueue)
	}
	return statusVerdict(rep)
}

// statusVerdict is batch status's exit status: errReported once the batch has
// ended with some updates rejected, dead-lettered or without an outcome; nil while
// it runs (the counts are not final).
func statusVerdict(rep statusReport) error {
	if !rep.Done {
		return nil
	}
	return verdict(models.BatchStatus{Channels: rep.Channels})
}

func (c *cli) statusTable(rep statusReport, taskQueue string) {
	state := rep.State
	if state == ops.StateTerminated {
		state = "terminated (batch cancel closes its waiting updates; reconciliation re-sends their cells)"
	}
	fmt.Fprintf(c.stdout, "%s: %s\n", rep.WorkflowID, strings.ReplaceAll(state, "_", " "))
	if rep.State == ops.StateRunning {
		if !rep.Planned {
			fmt.Fprintln(c.stdout, "not planned yet (is a worker running on task queue "+taskQueue+
				"?): totals below are the outcomes recorded so far")
		}
		for _, p := range rep.Progress {
			fmt.Fprintf(c.stdout, "%-12s %s\n", p.Channel, progressLine(p))
		}
	}
	t := newTable(c.stdout, "channel\ttotal\tcommitted\tsuperseded\trejected\tdead-lettered\tcancelled\tdeferred\trequests\t", tabwriter.AlignRight)
	for _, ch := range append(rep.Channels, rep.Totals) {
		t.row("%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t", ch.Channel, ch.Total, ch.Committed, ch.Superseded,
			ch.Rejected, ch.DeadLettered, ch.Cancelled, ch.Deferred, ch.Requests)
	}
	_ = t.flush()
	if lost := rep.Totals.Total - rep.Totals.Done(); lost != 0 && rep.Done {
		c.diag("WARNING: %d updates without an outcome", lost)
	}
	fmt.Fprintln(c.stdout, rep.UI)
}

// batchOutcomes lists a batch's outcomes: all rejections (mutation empty), or one
// mutation's fate, as a table or a JSON array.
func (c *cli) batchOutcomes(ctx context.Context, arg, mutation string) error {
	batchID, _ := batchWorkflowID(arg)
	d, err := c.open(ctx, useStore)
	if err != nil {
		return err
	}
	defer d.close()
	var list []store.MutationOutcome
	if mutation == "" {
		list, err = ops.Rejections(ctx, d.st, batchID)
	} else {
		list, err = ops.MutationOutcomes(ctx, d.st, batchID, mutation)
	}
	if err != nil {
		return err
	}
	if mutation != "" && len(list) == 0 {
		return notFoundError(fmt.Sprintf("batch outcome: no outcome for mutation %s in batch %s (not in the batch, or still on its way)",
			mutation, batchID))
	}
	if c.json() {
		return c.writeJSON(list)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mutation\tchannel\tfamily\toutcome\treason")
	for _, o := range list {
		fam := string(o.Family)
		if fam == "" {
			fam = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", o.MutationID, o.Channel, fam, o.Outcome, o.Reason)
	}
	_ = tw.Flush()
	c.diag("%d %s", len(list), map[bool]string{true: "rejections", false: "outcomes"}[mutation == ""])
	return nil
}
