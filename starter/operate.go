package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/limiter"
	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

func (c *cli) channelCmd() *cobra.Command {
	var reason string
	pause := &cobra.Command{
		Use:   "pause CHANNEL --reason REASON",
		Short: "Pause a channel everywhere: in the limiter and in every running batch",
		Long: `Pause CHANNEL in the shared limiter, so every worker and every new batch waits,
and signal every running BatchSync, which forwards the pause to its children.`,
		Args:              exactArgs(1, "one channel name"),
		ValidArgsFunction: c.channelArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usageError("channel pause: --reason must say why")
			}
			return c.channelPause(cmd.Context(), true, args[0], reason)
		},
	}
	pause.Flags().StringVarP(&reason, "reason", "r", "", "why the channel is paused; shown by quota and in the workflows (required)")
	required(pause, "reason")
	resume := &cobra.Command{
		Use:               "resume CHANNEL",
		Short:             "Resume a paused channel everywhere",
		Args:              exactArgs(1, "one channel name"),
		ValidArgsFunction: c.channelArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.channelPause(cmd.Context(), false, args[0], "")
		},
	}
	return group("channel", "Pause and resume a channel", pause, resume)
}

// channelPause sets (or clears) the limiter pause, so new batches wait too, and
// signals every running BatchSync, which forwards it to its children.
func (c *cli) channelPause(ctx context.Context, pause bool, name, reason string) error {
	verb := map[bool]string{true: "pause", false: "resume"}[pause]
	d, err := c.deps()
	if err != nil {
		return err
	}
	defer d.close()
	if _, ok := d.channel(name); !ok {
		return usageError(fmt.Sprintf("channel %s: %q is not a configured channel", verb, name))
	}
	if err := d.dial(ctx, useLimiter|useTemporal); err != nil {
		return err
	}
	n, err := ops.SetPause(ctx, d.tc, d.lim, name, pause, reason, func(id string, err error) {
		c.diag("signal %s: %v", id, err)
	})
	if err != nil {
		return err
	}
	if c.json() {
		return c.writeJSON(struct {
			Channel   string `json:"channel"`
			Action    string `json:"action"`
			Reason    string `json:"reason,omitempty"`
			Signalled int    `json:"signalled_batches"`
		}{name, verb, reason, n})
	}
	fmt.Fprintf(c.stdout, "%s %sd in the limiter; signalled %d running batches\n", name, verb, n)
	return nil
}

func (c *cli) dlqCmd() *cobra.Command {
	var channel string
	var count int64
	list := &cobra.Command{
		Use:   "list [--channel CHANNEL] [--count N]",
		Short: "Read the dead-letter queue, oldest first",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 {
				return usageError("dlq list: --count must be at least 1")
			}
			return c.dlqList(cmd.Context(), channel, count)
		},
	}
	c.channelFlag(list, &channel, everyChannel)
	list.Flags().Int64VarP(&count, "count", "n", 50, "most entries per channel")
	return group("dlq", "Read, export, acknowledge and replay the dead-letter queue", append([]*cobra.Command{list}, c.dlqCmds()...)...)
}

// deadLetterRow is one dead letter as dlq list prints it.
type deadLetterRow struct {
	Channel   string    `json:"channel"`
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	BatchID   string    `json:"batch_id"`
	Property  string    `json:"property_id"`
	Family    string    `json:"family"`
	Mutations []string  `json:"mutation_ids"`
	Nights    string    `json:"nights"`
	Reason    string    `json:"reason"`
	Status    int       `json:"status,omitempty"`
	Message   string    `json:"message,omitempty"`
}

func (c *cli) dlqList(ctx context.Context, channel string, count int64) error {
	d, slugs, err := c.openChannels(ctx, channel, useStore)
	if err != nil {
		return err
	}
	defer d.close()
	rows := []deadLetterRow{}
	for _, slug := range slugs {
		entries, err := d.st.DeadLetters(ctx, store.DeadLetterFilter{Channel: slug, Limit: int(count)})
		if err != nil {
			return err
		}
		for _, e := range entries {
			rows = append(rows, deadLetterRowOf(slug, e))
		}
	}
	if c.json() {
		return c.writeJSON(rows)
	}
	if err := c.deadLetterTable(rows); err != nil {
		return err
	}
	c.diag("%d entries", len(rows))
	return nil
}

// deadLetterRowOf is entry e of channel slug as dlq list prints it.
func deadLetterRowOf(slug string, e store.DeadLetter) deadLetterRow {
	return deadLetterRow{Channel: slug, ID: e.ID, At: e.ParkedAt, BatchID: e.BatchID, Property: e.PropertyID,
		Family: string(e.Family), Mutations: e.MutationIDs, Nights: nightsText(e.StayDates), Reason: e.Reason,
		Status: e.Status, Message: e.Message}
}

// deadLetterTable prints rows as dlq list's table.
func (c *cli) deadLetterTable(rows []deadLetterRow) error {
	t := newTable(c.stdout, "channel\tid\tat\tbatch\tproperty\tfamily\tupdates\tnights\treason\tstatus\tmessage", 0)
	for _, r := range rows {
		t.row("%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s", r.Channel, r.ID, r.At.Format("2006-01-02 15:04:05"),
			r.BatchID, r.Property, r.Family, len(r.Mutations), r.Nights, r.Reason, r.Status, r.Message)
	}
	return t.flush()
}

// nightsText is a dead letter's stay dates, shortened to the first and last.
func nightsText(ds []models.Date) string {
	switch len(ds) {
	case 0:
		return "-"
	case 1:
		return ds[0].String()
	}
	return fmt.Sprintf("%s..%s (%d)", ds[0], ds[len(ds)-1], len(ds))
}

func (c *cli) quotaCmd() *cobra.Command {
	var channel string
	cmd := &cobra.Command{
		Use:   "quota [--channel CHANNEL]",
		Short: "Daily quota, tier, pause and buckets per channel; the exit status is the tier",
		Long: `Print each channel's limiter state: daily quota used, its tier, the time to the
reset, an operator pause or a back-off after a 429, and the buckets; then a
"stopped:" line for each family a channel stopped with quota_exhausted, and on a
channel that limits per property a "backed off:" line with how many properties a
429 holds back and the ones that wait longest.

The exit status is the worst tier among the channels shown (or the one named with
--channel), for cron jobs and alerting:
  0 ok (< 70 %)   1 warn (≥ 70 %)   2 page (≥ 85 %)   3 throttle (≥ 95 %) or stop (100 %,
  or a family stopped)
A failure to read the state exits 64 or more (see starter --help), never 0–3.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.quota(cmd.Context(), channel) },
	}
	c.channelFlag(cmd, &channel, "one channel (default: every configured channel, exit status of the worst)")
	return cmd
}

// quotaRow is one channel's limiter state as quota prints it. A per-property
// channel has one window per property: WindowLimit is then the limit of each
// (the configured rate), and InWindow and Ahead, which count one window, are 0.
type quotaRow struct {
	ops.QuotaRow
	Scope       models.LimitScope `json:"scope"`
	WindowLimit int               `json:"window_limit"`
}

// quotaRows are rows as quota prints them, with each channel's scope.
func (d *deps) quotaRows(rows []ops.QuotaRow) []quotaRow {
	out := make([]quotaRow, len(rows))
	for i, r := range rows {
		out[i] = quotaRow{QuotaRow: r, Scope: models.ScopeChannel, WindowLimit: r.WindowLimit}
		if ch, ok := d.channel(r.Channel); ok && ch.Scope == models.ScopeProperty {
			out[i].Scope, out[i].WindowLimit = models.ScopeProperty, ch.RatePerMinute
		}
	}
	return out
}

// windowLimit is the window limit column: per property for a per-property channel.
func (r quotaRow) windowLimit() string {
	if r.Scope == models.ScopeProperty {
		return fmt.Sprintf("%d/property", r.WindowLimit)
	}
	return strconv.Itoa(r.WindowLimit)
}

// tierExitCode is the exit status of a quota tier.
func tierExitCode(t limiter.Tier) int {
	switch t {
	case limiter.TierWarn:
		return exitWarn
	case limiter.TierPage:
		return exitPage
	case limiter.TierThrottle, limiter.TierStop:
		return exitThrottle
	}
	return exitOK
}

func (c *cli) quota(ctx context.Context, channel string) error {
	d, slugs, err := c.openChannels(ctx, channel, useLimiter)
	if err != nil {
		return err
	}
	defer d.close()
	read, err := ops.Quota(ctx, d.lim, slugs)
	if err != nil {
		return err
	}
	rows := d.quotaRows(read)
	worst := exitOK
	for _, r := range rows {
		worst = max(worst, tierExitCode(r.Tier))
		if len(r.Stopped) > 0 {
			// Nothing of the family goes until the reset: as a stopped quota.
			worst = max(worst, tierExitCode(limiter.TierStop))
		}
	}
	if c.json() {
		if err := c.writeJSON(struct {
			Channels []quotaRow   `json:"channels"`
			Worst    limiter.Tier `json:"worst_tier"`
			Exit     int          `json:"exit_status"`
		}{rows, ops.WorstTier(read), worst}); err != nil {
			return err
		}
	} else {
		t := newTable(c.stdout, "channel\tdaily used\tlimit\tused\ttier\tresets in\tpaused\tback-off\twindow limit\tin window\treserved ahead\tothers' use\tbreaker", 0)
		for _, r := range rows {
			t.row("%s\t%d\t%d\t%.1f%%\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s", r.Channel, r.DailyUsed, r.DailyLimit, r.UsedPercent, r.Tier,
				seconds(r.ResetsInSeconds).Round(time.Second), r.Paused, seconds(r.BackoffSeconds).Round(time.Millisecond),
				r.windowLimit(), r.InWindow, r.Ahead, r.Foreign, r.Breaker)
		}
		if err := t.flush(); err != nil {
			return err
		}
		for _, r := range rows {
			for _, f := range r.Stopped {
				if _, err := fmt.Fprintf(c.stdout, "stopped: %s %s until %s (the channel answered quota_exhausted)\n",
					r.Channel, f.Family, f.Until.Format(time.RFC3339)); err != nil {
					return err
				}
			}
			if r.BackedOff > 0 {
				if _, err := fmt.Fprintf(c.stdout, "backed off: %s %d properties after a 429 (its other properties go on): %s\n",
					r.Channel, r.BackedOff, propertyBackoffs(r.PropertyBackoffs, r.BackedOff)); err != nil {
					return err
				}
			}
		}
	}
	if worst != exitOK {
		return tierExit{worst}
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// propertyBackoffs lists the property back-offs quota prints: property/window and
// what is left, and how many more there are.
func propertyBackoffs(bs []ops.PropertyBackoff, n int) string {
	parts := make([]string, 0, len(bs)+1)
	for _, b := range bs {
		parts = append(parts, fmt.Sprintf("%s/%s %s", b.Property, b.Window, seconds(b.ForSeconds).Round(time.Millisecond)))
	}
	if more := n - len(bs); more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(parts, ", ")
}
