package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"go.temporal.io/sdk/activity"

	"github.com/paritysync/paritysync/activities/store"
	"github.com/paritysync/paritysync/models"
)

// FinishBatch records how a batch ended, so listings read it from the store, and
// with a callback URL puts the batch's completion event in the outbox in the same
// transaction; intake's delivery loop sends it (signed, retried with backoff). A
// receiver that fails never holds the batch open, and Temporal retries only this
// write. Every attempt builds the same event (its id from the batch id, its time
// from the workflow), and the outbox keeps the first.
func (a *Activities) FinishBatch(ctx context.Context, in models.BatchFinished) error {
	var cb *store.CallbackEvent
	tenant, _, dotted := strings.Cut(in.BatchID, ".")
	if in.CallbackURL != "" && dotted {
		ev := BatchEndedEvent(in)
		body, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode callback of %s: %w", in.BatchID, err)
		}
		cb = &store.CallbackEvent{EventID: ev.EventID, Tenant: tenant, URL: in.CallbackURL, Body: body}
	}
	if err := a.Store.FinishBatch(ctx, in.BatchID, in.State, cb); err != nil {
		return err
	}
	activity.GetLogger(ctx).Info("batch finished", "batch", in.BatchID, "state", in.State, "callback", cb != nil)
	return nil
}

// BatchEndedEvent is the completion event of the batch in describes.
func BatchEndedEvent(in models.BatchFinished) models.BatchEndedEvent {
	sum := sha256.Sum256([]byte(models.EventBatchEnded + "\x00" + in.BatchID))
	channels := in.Channels
	if channels == nil {
		channels = []models.ChannelCounts{}
	}
	return models.BatchEndedEvent{EventID: "evt_" + hex.EncodeToString(sum[:16]), Type: models.EventBatchEnded,
		BatchID: in.BatchID, State: in.State, EndedAt: in.EndedAt.UTC(), Counts: models.BatchStatus{Channels: channels}.Totals(),
		Channels: channels}
}
