package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/models"
)

// AdmitChanges admits a submission staged in the claim check into its channel's
// waiting changes; the smoother calls it for each submit it accepts.
func (a *Activities) AdmitChanges(ctx context.Context, in models.AdmitInput) (models.Admitted, error) {
	c, err := a.Store.AdmitChanges(ctx, in.Channel, in.Submission)
	return models.Admitted{Changes: c}, err
}

// WaitingChanges counts a channel's admitted changes still in the claim check; a
// smoother started afresh begins with them.
func (a *Activities) WaitingChanges(ctx context.Context, channel string) (models.Admitted, error) {
	c, err := a.Store.WaitingChanges(ctx, channel)
	return models.Admitted{Changes: c}, err
}

// TakeChanges moves the oldest waiting changes of a channel into a batch's payload;
// the smoother calls it before it starts the batch, with PayloadKey.
func (a *Activities) TakeChanges(ctx context.Context, in models.TakeInput) (models.Taken, error) {
	return a.Store.TakeChanges(ctx, in.Channel, in.BatchID, in.MaxPriority, in.Max)
}

// CloseBatch gives every update of a batch that ended without closing its outcomes
// (failed, terminated, timed out) the outcome cancelled, and returns how many.
func (a *Activities) CloseBatch(ctx context.Context, in models.CloseInput) (int, error) {
	n, err := a.Store.ClosePending(ctx, in.BatchID, in.Reason)
	if err != nil {
		return n, err
	}
	activity.GetLogger(ctx).Warn("batch closed", "batch", in.BatchID, "cancelled_updates", n, "reason", in.Reason)
	return n, nil
}
