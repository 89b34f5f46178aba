package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/paritysync/paritysync/models"
	"github.com/paritysync/paritysync/workflows"
)

// ReconcileScheduleID is the one nightly reconciliation schedule.
const ReconcileScheduleID = "reconcile-nightly"

// StartReconcile starts today's reconciliation of in, as workflow
// reconcile/<date>.
func StartReconcile(ctx context.Context, tc client.Client, queue string, in models.ReconcileInput) (client.WorkflowRun, error) {
	id := models.ReconcileWorkflowID(models.DateOf(time.Now()))
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.Reconcile, in)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	return run, nil
}

// ScheduleReconcile creates the schedule ReconcileScheduleID, running in at cron
// (a cron expression in UTC), or updates it when it exists.
func ScheduleReconcile(ctx context.Context, tc client.Client, queue string, in models.ReconcileInput, cron string) error {
	action := &client.ScheduleWorkflowAction{
		// Scheduled runs are named reconcile/nightly-<time>.
		ID: "reconcile/nightly", Workflow: workflows.Reconcile, Args: []any{in}, TaskQueue: queue,
	}
	spec := client.ScheduleSpec{CronExpressions: []string{cron}}
	_, err := tc.ScheduleClient().Create(ctx, client.ScheduleOptions{ID: ReconcileScheduleID, Spec: spec, Action: action})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		h := tc.ScheduleClient().GetHandle(ctx, ReconcileScheduleID)
		err = h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(u client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			u.Description.Schedule.Spec = &spec
			u.Description.Schedule.Action = action
			return &client.ScheduleUpdate{Schedule: &u.Description.Schedule}, nil
		}})
	}
	if err != nil {
		return fmt.Errorf("schedule %s: %w", ReconcileScheduleID, err)
	}
	return nil
}
