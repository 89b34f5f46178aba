package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// reconcileScheduleID is the one nightly reconciliation schedule.
const reconcileScheduleID = "reconcile-nightly"

// reconcile runs reconciliation now or schedules it nightly.
func reconcile(schedule bool, args []string, out io.Writer, getenv func(string) string) error {
	name := map[bool]string{true: "reconcile schedule", false: "reconcile run"}[schedule]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	channel := fs.String("channel", "", "one channel (default: all)")
	horizon := fs.Int("horizon-days", models.DefaultReconcileHorizon, "nights ahead to compare")
	cron := fs.String("cron", "0 3 * * *", "when to run, a cron expression in UTC (schedule only)")
	wait := fs.Bool("wait", false, "wait for the run and print what it found (run only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *horizon < 1 {
		return usageError{name + ": --horizon-days must be at least 1"}
	}
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	slugs, err := d.selectChannels(*channel)
	if err != nil {
		return err
	}
	in := models.ReconcileInput{Channels: slugs, HorizonDays: *horizon}
	ctx := context.Background()
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	if schedule {
		return scheduleReconcile(ctx, tc, d, in, *cron, out)
	}
	id := models.ReconcileWorkflowID(models.DateOf(time.Now()))
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: d.settings.TaskQueue}, workflows.Reconcile, in)
	if err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	fmt.Fprintf(out, "started %s over %d channels, %d nights\n%s\n", id, len(slugs), *horizon, d.uiLink(id))
	if !*wait {
		return nil
	}
	var res models.ReconcileResult
	if err := run.Get(ctx, &res); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "channel\tchecked\tdrifted\tresent (no read-back)\trepaired\trepair dead-lettered\t")
	for _, c := range res.Channels {
		var t models.ChannelCounts
		if c.Repair != nil {
			t = c.Repair.Totals()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", c.Channel, c.Checked, c.Drifted, c.Resent, t.Committed, t.DeadLettered)
	}
	return tw.Flush()
}

// scheduleReconcile creates the nightly schedule, or updates it when it exists.
func scheduleReconcile(ctx context.Context, tc client.Client, d *deps, in models.ReconcileInput, cron string, out io.Writer) error {
	action := &client.ScheduleWorkflowAction{
		// Scheduled runs are named reconcile/nightly-<time>.
		ID: "reconcile/nightly", Workflow: workflows.Reconcile, Args: []any{in}, TaskQueue: d.settings.TaskQueue,
	}
	spec := client.ScheduleSpec{CronExpressions: []string{cron}}
	_, err := tc.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: reconcileScheduleID, Spec: spec, Action: action})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		h := tc.ScheduleClient().GetHandle(ctx, reconcileScheduleID)
		err = h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(u client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			u.Description.Schedule.Spec = &spec
			u.Description.Schedule.Action = action
			return &client.ScheduleUpdate{Schedule: &u.Description.Schedule}, nil
		}})
	}
	if err != nil {
		return fmt.Errorf("schedule %s: %w", reconcileScheduleID, err)
	}
	fmt.Fprintf(out, "schedule %s: %q (UTC) over %v, %d nights\n%s/namespaces/%s/schedules/%s\n", reconcileScheduleID, cron,
		in.Channels, in.HorizonDays, d.settings.TemporalUI, d.settings.TemporalNamespace, reconcileScheduleID)
	return nil
}
