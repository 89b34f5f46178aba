package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// channelPause sets (or clears) the limiter pause, so new batches wait too, and
// signals every running BatchSync, which forwards it to its children.
func channelPause(pause bool, args []string, out io.Writer, getenv func(string) string) error {
	verb := map[bool]string{true: "pause", false: "resume"}[pause]
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{"channel " + verb + ": want a channel name"}
	}
	name := args[0]
	fs := flag.NewFlagSet("channel "+verb, flag.ContinueOnError)
	reason := fs.String("reason", "", "why (required to pause)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if pause && strings.TrimSpace(*reason) == "" {
		return usageError{"channel pause: --reason is required"}
	}
	d, err := loadDeps(getenv)
	if err != nil {
		return err
	}
	defer d.close()
	if !d.hasChannel(name) {
		return fmt.Errorf("channel %q is not configured", name)
	}
	ctx := context.Background()
	lim, err := d.limiter(ctx)
	if err != nil {
		return err
	}
	if pause {
		err = lim.Pause(ctx, name, *reason)
	} else {
		err = lim.Resume(ctx, name)
	}
	if err != nil {
		return err
	}
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	signal := models.SignalResumeChannel
	if pause {
		signal = models.SignalPauseChannel
	}
	var token []byte
	n := 0
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query:         "WorkflowType = 'BatchSync' AND ExecutionStatus = 'Running'",
			NextPageToken: token,
		})
		if err != nil {
			return fmt.Errorf("list running batches: %w", err)
		}
		for _, e := range resp.Executions {
			if e.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				continue
			}
			id := e.Execution.WorkflowId
			if err := tc.SignalWorkflow(ctx, id, "", signal, models.PauseSignal{Channel: name, Reason: *reason}); err != nil {
				fmt.Fprintf(out, "signal %s: %v\n", id, err)
				continue
			}
			n++
		}
		if token = resp.NextPageToken; len(token) == 0 {
			break
		}
	}
	fmt.Fprintf(out, "%s %sd in the limiter; signalled %d running batches\n", name, verb, n)
	return nil
}

func dlqList(args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("dlq list", flag.ContinueOnError)
	channel := fs.String("channel", "", "one channel (default: all)")
	count := fs.Int("count", 50, "most entries per channel")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
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
	slugs, err := d.selectChannels(*channel)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "channel\tid\tat\tbatch\tproperty\tfamily\tupdates\tnights\treason\tstatus\tmessage")
	total := 0
	for _, slug := range slugs {
		entries, err := st.DeadLetters(ctx, store.DeadLetterFilter{Channel: slug, Limit: *count})
		if err != nil {
			return err
		}
		for _, e := range entries {
			total++
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", slug, e.ID, e.ParkedAt.Format("2006-01-02 15:04:05"),
				e.BatchID, e.PropertyID, e.Family, len(e.MutationIDs), nightsText(e.StayDates), e.Reason, e.Status, e.Message)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "%d entries\n", total)
	return nil
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

func quota(args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("quota", flag.ContinueOnError)
	channel := fs.String("channel", "", "one channel (default: all)")
	if err := parseFlags(fs, args); err != nil {
		return err
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
	ctx := context.Background()
	lim, err := d.limiter(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "channel\tdaily used\tlimit\ttier\tresets in\tpaused\tback-off\twindow limit\tin window\treserved ahead\tothers' use")
	for _, slug := range slugs {
		s, err := lim.Status(ctx, slug)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", slug, s.DailyUsed, s.DailyLimit, s.Tier,
			s.QuotaResetsIn.Round(1e9), s.PausedReason, s.PausedFor.Round(1e6), s.Limit, s.InWindow, s.Ahead, s.Foreign)
	}
	return tw.Flush()
}
