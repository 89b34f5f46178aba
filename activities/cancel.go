package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/models"
)

// CancelBatch closes a cancelled batch: every update of its stored requests that
// has no outcome yet gets the outcome cancelled (what was pushed before the cancel
// keeps its own), and it returns the batch's outcomes as stored, per channel.
// BatchSync calls it once its children stopped.
func (a *Activities) CancelBatch(ctx context.Context, in models.CancelInput) ([]models.ChannelCounts, error) {
	reason := in.Reason
	if reason == "" {
		reason = "batch cancelled"
	}
	n, err := a.Store.CancelPending(ctx, in.BatchID, reason)
	if err != nil {
		return nil, err
	}
	activity.GetLogger(ctx).Warn("batch cancelled", "batch", in.BatchID, "cancelled_updates", n)
	return a.Store.BatchCounts(ctx, in.BatchID)
}
