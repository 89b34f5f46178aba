package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/ops"
)

// Dead letters you can act on: export them, acknowledge them, replay them.

// dlqSelection is the dead letters a dlq command acts on.
type dlqSelection struct {
	channel, reason, batch, ids string
	acked                       bool
}

// flags registers the selection's flags on cmd.
func (sel *dlqSelection) flags(c *cli, cmd *cobra.Command) {
	c.channelFlag(cmd, &sel.channel, "only this channel")
	cmd.Flags().StringVar(&sel.reason, "reason", "", "only this reason (rejected, auth, quota_exhausted, …)")
	cmd.Flags().StringVar(&sel.batch, "batch", "", "only this batch")
	cmd.Flags().StringVar(&sel.ids, "id", "", "only these entries (comma-separated ids)")
	cmd.Flags().BoolVar(&sel.acked, "acked", false, "include entries already acknowledged")
}

// empty reports whether no entry was selected by channel, reason, batch or id.
func (sel *dlqSelection) empty() bool {
	return sel.ids == "" && sel.channel == "" && sel.reason == "" && sel.batch == ""
}

// selection is sel as ops selects dead letters.
func (sel *dlqSelection) selection() (ops.DeadLetterSelection, error) {
	out := ops.DeadLetterSelection{Channel: sel.channel, Reason: sel.reason, BatchID: sel.batch, Acked: sel.acked}
	if sel.ids == "" {
		return out, nil
	}
	for _, s := range strings.Split(sel.ids, ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return out, usageError(fmt.Sprintf("--id: %q is not an entry id", s))
		}
		out.IDs = append(out.IDs, id)
	}
	return out, nil
}

const dlqSelectionHelp = `Entries are selected with --channel C, --reason R, --batch B and --id N,… (and
--acked for entries already acknowledged).`

// dlqCmds are the dead-letter commands beside list.
func (c *cli) dlqCmds() []*cobra.Command {
	var exportSel dlqSelection
	export := &cobra.Command{
		Use:   "export [--channel C] [--reason R] [--batch B] [--id N,…] [--acked]",
		Short: "Write dead letters as JSON lines",
		Long: "Write the selected dead letters (every open one without a selection) as JSON\n" +
			"lines, one entry a line, with its requests, mutation ids and stay dates; the\n" +
			"format is the same with --output json.\n" + dlqSelectionHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.dlqExport(cmd.Context(), &exportSel) },
	}
	exportSel.flags(c, export)

	var ackSel dlqSelection
	var note string
	ack := &cobra.Command{
		Use:   "ack SELECTION [--note N]",
		Short: "Mark dead letters as dealt with",
		Long:  "Acknowledge the selected dead letters, with an optional --note. A selection is\nrequired.\n" + dlqSelectionHelp,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ackSel.empty() {
				return usageError("dlq ack: select entries (--id, --channel, --reason or --batch)")
			}
			return c.dlqAck(cmd.Context(), &ackSel, note)
		},
	}
	ackSel.flags(c, ack)
	ack.Flags().StringVar(&note, "note", "", "why they are dealt with, kept with each entry")

	var replaySel dlqSelection
	var all, dryRun, wait bool
	replay := &cobra.Command{
		Use:   "replay (SELECTION | --all) [--dry-run] [--wait]",
		Short: "Re-send dead letters' newest desired values as a new batch",
		Long: `Re-send the selected dead letters as a new batch — the newest desired values of
their cells, never older ones — then acknowledge them (--wait follows the batch).
A selection, or --all for every open dead letter, is required; --dry-run prints
what would be replayed and sends nothing.
` + dlqSelectionHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case replaySel.empty() && !all:
				return usageError("dlq replay: select entries (--id, --channel, --reason or --batch), or --all for every open dead letter")
			case !replaySel.empty() && all:
				return usageError("dlq replay: --all replays every open dead letter; drop it or the selection")
			case dryRun && wait:
				return usageError("dlq replay: --dry-run sends nothing, so there is nothing to --wait for")
			}
			return c.dlqReplay(cmd.Context(), &replaySel, dryRun, wait)
		},
	}
	replaySel.flags(c, replay)
	replay.Flags().BoolVar(&all, "all", false, "replay every open dead letter (instead of a selection)")
	replay.Flags().BoolVar(&dryRun, "dry-run", false, "print the entries that would be replayed; send and acknowledge nothing")
	replay.Flags().BoolVarP(&wait, "wait", "w", false, "follow the replay batch until it ends and print its summary")
	return []*cobra.Command{export, ack, replay}
}

// openSelection reads sel (a bad --id is a usage error before anything connects)
// and opens the store.
func (c *cli) openSelection(ctx context.Context, sel *dlqSelection) (*deps, ops.DeadLetterSelection, error) {
	s, err := sel.selection()
	if err != nil {
		return nil, s, err
	}
	// --channel is not checked against the configuration: dead letters of a
	// channel since removed from it are still exported, acknowledged or replayed.
	d, err := c.open(ctx, useStore)
	return d, s, err
}

func (c *cli) dlqExport(ctx context.Context, sel *dlqSelection) error {
	d, s, err := c.openSelection(ctx, sel)
	if err != nil {
		return err
	}
	defer d.close()
	// A line an entry as it is read, a page at a time, as intake exports them.
	enc := json.NewEncoder(c.stdout)
	n := 0
	err = ops.EachDeadLetter(ctx, d.st, s, func(e store.DeadLetter) error {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("write entry %d: %w", e.ID, err)
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	c.diag("%d entries", n)
	return nil
}

func (c *cli) dlqAck(ctx context.Context, sel *dlqSelection, note string) error {
	d, s, err := c.openSelection(ctx, sel)
	if err != nil {
		return err
	}
	defer d.close()
	a, err := ops.AckDeadLetters(ctx, d.st, s, note)
	if err != nil {
		return err
	}
	if c.json() {
		return c.writeJSON(a)
	}
	fmt.Fprintf(c.stdout, "%d entries acknowledged\n", a.Acknowledged)
	return nil
}

// replayed is what dlq replay prints.
type replayed struct {
	DryRun     bool            `json:"dry_run,omitempty"`
	Entries    int             `json:"entries"`
	Updates    int             `json:"updates"`
	IDs        []int64         `json:"ids"`
	BatchID    string          `json:"batch_id,omitempty"`
	WorkflowID string          `json:"workflow_id,omitempty"`
	Acked      int             `json:"acknowledged"`
	UI         string          `json:"ui,omitempty"`
	Would      []deadLetterRow `json:"would_replay,omitempty"`
}

// dlqReplay re-sends the selected dead letters as one new batch and acknowledges
// them. Each parked update goes at the version it carried: the batch records it as
// desired, so one whose cell moved on to a newer version since is superseded and
// never sent (the newer one is the cell's desired state, sent by its own batch or by
// reconciliation). The batch re-sends content the channel may have seen, so it
// carries a fresh idempotency salt.
func (c *cli) dlqReplay(ctx context.Context, sel *dlqSelection, dryRun, wait bool) error {
	d, s, err := c.openSelection(ctx, sel)
	if err != nil {
		return err
	}
	defer d.close()
	entries, err := ops.SelectDeadLetters(ctx, d.st, s)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		if c.json() {
			return c.writeJSON(replayed{DryRun: dryRun, IDs: []int64{}})
		}
		fmt.Fprintln(c.stdout, "no dead letters selected")
		return nil
	}
	if dryRun {
		out := replayed{DryRun: true, Entries: len(entries), IDs: ops.DeadLetterIDs(entries)}
		for _, e := range entries {
			out.Updates += len(e.Mutations())
			out.Would = append(out.Would, deadLetterRowOf(e.Channel, e))
		}
		if c.json() {
			return c.writeJSON(out)
		}
		c.deadLetterTable(out.Would)
		fmt.Fprintf(c.stdout, "would replay %d entries (%d updates) as one new batch; nothing sent, nothing acknowledged\n",
			out.Entries, out.Updates)
		return nil
	}
	if err := d.dial(ctx, useTemporal); err != nil {
		return err
	}
	r, err := ops.ReplayDeadLetters(ctx, d.tc, d.settings.TaskQueue, d.st, "", entries)
	if err != nil {
		return err
	}
	out := replayed{Entries: r.Entries, Updates: r.Updates, IDs: ops.DeadLetterIDs(entries), BatchID: r.BatchID,
		WorkflowID: r.WorkflowID, Acked: r.Acked, UI: d.uiLink(r.WorkflowID)}
	if !wait {
		if c.json() {
			return c.writeJSON(out)
		}
		fmt.Fprintf(c.stdout, "replaying %d entries (%d updates) as %s; %d acknowledged\n%s\n", r.Entries, r.Updates,
			r.WorkflowID, r.Acked, out.UI)
		return nil
	}
	c.diag("replaying %d entries (%d updates) as %s; %d acknowledged; following it\n%s", r.Entries, r.Updates,
		r.WorkflowID, r.Acked, out.UI)
	final, err := c.followBatch(ctx, c.follower(d, r.Run, r.BatchID), r.BatchID, out.UI)
	if err != nil {
		return err
	}
	if c.json() {
		if err := c.writeJSON(struct {
			replayed
			Status any `json:"status"`
		}{out, final}); err != nil {
			return err
		}
		return verdict(final)
	}
	return c.summary(final)
}
