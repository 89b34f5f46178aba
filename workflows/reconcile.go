package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/paritysync/paritysync/models"
)

// Reconcile reads every channel's state back for the coming nights, compares it
// with the desired state, and re-sends at their desired versions the cells that
// drifted or were never confirmed, as a BatchSync per channel: a full sync at bulk
// priority, with stop-sells kept urgent. It then prunes the store. A Temporal
// Schedule runs it nightly (starter reconcile schedule).
func Reconcile(ctx workflow.Context, in models.ReconcileInput) (models.ReconcileResult, error) {
	day := models.DateOf(workflow.Now(ctx))
	res := models.ReconcileResult{Day: day}
	if len(in.Channels) == 0 {
		return res, temporal.NewNonRetryableApplicationError("reconcile: no channels given", "InvalidInput", nil)
	}
	horizon := in.HorizonDays
	if horizon <= 0 {
		horizon = models.DefaultReconcileHorizon
	}
	// Reading a channel back is retried a few times, then the day's run reports it.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5, InitialInterval: 5 * time.Second, BackoffCoefficient: 2},
		Priority:            temporal.Priority{PriorityKey: models.PriorityBulk},
	})

	info := workflow.GetInfo(ctx)
	diffs := make([]workflow.Future, len(in.Channels))
	for i, ch := range in.Channels {
		diffs[i] = workflow.ExecuteActivity(actx, models.ActivityDiffChannel, models.DiffInput{
			Channel: ch, From: day, To: day.AddDays(horizon - 1), BatchID: repairBatchID(info.WorkflowExecution.RunID, ch),
		})
	}
	var errs []error
	repairs := make([]workflow.Future, len(in.Channels))
	res.Channels = make([]models.ChannelDrift, len(in.Channels))
	for i, ch := range in.Channels {
		res.Channels[i].Channel = ch
		if err := diffs[i].Get(ctx, &res.Channels[i]); err != nil {
			errs = append(errs, fmt.Errorf("diff %s: %w", ch, err))
			continue
		}
		if res.Channels[i].PayloadKey == "" {
			// Nothing drifted, and nothing to re-send.
			continue
		}
		batchID := repairBatchID(info.WorkflowExecution.RunID, ch)
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID:        models.BatchWorkflowID(batchID),
			TaskQueue:         workflow.GetInfo(ctx).TaskQueueName,
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
			Priority:          temporal.Priority{PriorityKey: models.PriorityBulk},
			TypedSearchAttributes: temporal.NewSearchAttributes(
				attrBatchID.ValueSet(batchID), attrChannel.ValueSet(ch), attrPriority.ValueSet(int64(models.PriorityBulk))),
		})
		repairs[i] = workflow.ExecuteChildWorkflow(cctx, BatchSync, models.BatchSyncInput{
			BatchID: batchID, PayloadKey: res.Channels[i].PayloadKey, Retry: models.DefaultRetryPolicy(),
			// The channel acknowledged this content once already; a fresh key per
			// run makes it apply the content again instead of replaying.
			ResendSalt: workflow.GetInfo(ctx).WorkflowExecution.RunID,
		})
	}
	for i, f := range repairs {
		if f == nil {
			continue
		}
		var st models.BatchStatus
		if err := f.Get(ctx, &st); err != nil {
			errs = append(errs, fmt.Errorf("repair %s: %w", in.Channels[i], err))
			continue
		}
		res.Channels[i].Repair = &st
	}
	// The nightly run also keeps the store within its retention.
	if err := workflow.ExecuteActivity(withActivity(ctx, 10*time.Minute, models.PriorityBulk), models.ActivityPruneStore).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("prune store", "error", err)
	}
	workflow.GetLogger(ctx).Info("reconciled", "day", day.String(), "channels", len(in.Channels), "errors", len(errs))
	return res, errors.Join(errs...)
}

// repairBatchID names the batch that repairs one channel's drift found by one run
// of Reconcile: run ids never repeat, so neither do repair batches, however many
// repairs run on one day.
func repairBatchID(runID, channel string) string {
	return fmt.Sprintf("repair-%s-%s", runID, channel)
}
