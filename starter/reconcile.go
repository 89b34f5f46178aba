package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/robfig/cron"
	"github.com/spf13/cobra"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/ops"
)

func (c *cli) reconcileCmd() *cobra.Command {
	var channel, cron string
	var horizon int
	var wait bool
	runCmd := &cobra.Command{
		Use:   "run [--channel CHANNEL] [--horizon-days N] [--wait]",
		Short: "Read the channels back now and re-send what drifted",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.reconcile(cmd.Context(), false, channel, horizon, "", wait)
		},
	}
	c.channelFlag(runCmd, &channel, everyChannel)
	runCmd.Flags().IntVar(&horizon, "horizon-days", models.DefaultReconcileHorizon, "nights ahead to compare")
	runCmd.Flags().BoolVarP(&wait, "wait", "w", false, "wait for the run and print what it found")
	schedCmd := &cobra.Command{
		Use:   "schedule [--cron EXPR] [--channel CHANNEL] [--horizon-days N]",
		Short: "Run reconciliation on a schedule (a Temporal Schedule), nightly by default",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkCron(cron); err != nil {
				return err
			}
			return c.reconcile(cmd.Context(), true, channel, horizon, cron, false)
		},
	}
	c.channelFlag(schedCmd, &channel, everyChannel)
	schedCmd.Flags().IntVar(&horizon, "horizon-days", models.DefaultReconcileHorizon, "nights ahead to compare")
	schedCmd.Flags().StringVar(&cron, "cron", "0 3 * * *", "when to run: a 5-field cron expression in UTC, or @daily, @hourly, @every 6h …")
	return group("reconcile", "Compare the channels with the ledger and repair drift", runCmd, schedCmd)
}

// checkCron refuses a --cron expression that is not one, before anything connects
// (the schedule would otherwise fail on the server, or never run).
func checkCron(expr string) error {
	if _, err := cron.ParseStandard(expr); err != nil {
		return usageError(fmt.Sprintf("--cron %q: %v (want 5 fields: minute hour day-of-month month day-of-week, or @daily, @hourly, @every 6h …)", expr, err))
	}
	return nil
}

// reconcile runs reconciliation now or schedules it.
func (c *cli) reconcile(ctx context.Context, schedule bool, channel string, horizon int, cron string, wait bool) error {
	if horizon < 1 {
		return usageError("--horizon-days must be at least 1")
	}
	d, slugs, err := c.openChannels(ctx, channel, useTemporal)
	if err != nil {
		return err
	}
	defer d.close()
	in := models.ReconcileInput{Channels: slugs, HorizonDays: horizon}
	if schedule {
		return c.scheduleReconcile(ctx, d, in, cron)
	}
	run, err := ops.StartReconcile(ctx, d.tc, d.settings.TaskQueue, in)
	if err != nil {
		return err
	}
	id := run.GetID()
	if !wait {
		if c.json() {
			return c.writeJSON(map[string]any{"workflow_id": id, "channels": slugs, "horizon_days": horizon, "ui": d.uiLink(id)})
		}
		fmt.Fprintf(c.stdout, "started %s over %d channels, %d nights\n%s\n", id, len(slugs), horizon, d.uiLink(id))
		return nil
	}
	c.diag("started %s over %d channels, %d nights; waiting (Ctrl-C stops waiting, not the run)\n%s", id, len(slugs), horizon, d.uiLink(id))
	var res models.ReconcileResult
	if err := run.Get(ctx, &res); err != nil {
		if ctx.Err() != nil {
			return interruptedError(fmt.Sprintf("interrupted: %s keeps running; follow it at %s", id, d.uiLink(id)))
		}
		return fmt.Errorf("%s: %w", id, err)
	}
	if c.json() {
		return c.writeJSON(res)
	}
	t := newTable(c.stdout, "channel\tchecked\tdrifted\tresent (no read-back)\trepaired\trepair dead-lettered\t", tabwriter.AlignRight)
	for _, ch := range res.Channels {
		var tot models.ChannelCounts
		if ch.Repair != nil {
			tot = ch.Repair.Totals()
		}
		t.row("%s\t%d\t%d\t%d\t%d\t%d\t", ch.Channel, ch.Checked, ch.Drifted, ch.Resent, tot.Committed, tot.DeadLettered)
	}
	return t.flush()
}

// scheduleReconcile creates the nightly schedule, or updates it when it exists.
func (c *cli) scheduleReconcile(ctx context.Context, d *deps, in models.ReconcileInput, cron string) error {
	if err := ops.ScheduleReconcile(ctx, d.tc, d.settings.TaskQueue, in, cron); err != nil {
		return err
	}
	id := ops.ReconcileScheduleID
	link := ops.ScheduleLink(d.settings, id)
	if c.json() {
		return c.writeJSON(map[string]any{"schedule_id": id, "cron": cron, "channels": in.Channels,
			"horizon_days": in.HorizonDays, "ui": link})
	}
	fmt.Fprintf(c.stdout, "schedule %s: %q (UTC) over %v, %d nights\n%s\n", id, cron, in.Channels, in.HorizonDays, link)
	return nil
}
